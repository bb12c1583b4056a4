/* Test helpers: one main() per test, exit 77 = skipped. Multi-process tests
 * fork and talk over a socketpair, as separate hosts would over the network. */
#ifndef XFER_TEST_HELPERS_H
#define XFER_TEST_HELPERS_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "xfer.h"

#define T_SKIP 77

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

#define CHECK_RC(expr, want)                                                               \
	do {                                                                               \
		int rc_ = (expr);                                                          \
		if (rc_ != (want)) {                                                       \
			fprintf(stderr, "%s:%d: %s = %d (%s), want %d (%s)\n", __FILE__,   \
				__LINE__, #expr, rc_, xfer_strerror(rc_), (want),          \
				xfer_strerror(want));                                      \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

#define CHECK_OK(expr) CHECK_RC(expr, 0)

/* The provider under test: $XFER_TEST_PROVIDER, default "tcp" (on loopback). */
const char *t_provider(void);
/* Engine attributes for the provider under test, on loopback for tcp. */
void t_attr(struct xfer_attr *a);
/* $XFER_TEST_TIME_SCALE (default 1): how many times longer than on a
 * quiet host the waits, heartbeat allowances and default deadlines of the
 * tests are. The soft-RoCE VM (software RDMA on an emulated CPU) sets it. */
unsigned t_time_scale(void);
/* Creates an engine, or exits 77 when the provider is not available here. */
xfer_engine_t *t_engine(const struct xfer_attr *a);

/* Runs fn in `n` child processes, each with its own socket to the parent,
 * and parent_fn in this one; returns 0 when every process succeeded. */
/* Child index allowed to die by a signal (a case that kills it); -1: none. */
extern int t_child_may_die;
typedef int (*t_proc_fn)(int idx, int fd, void *arg);
typedef int (*t_parent_fn)(int n, const int *fds, void *arg);
int t_run_procs(int n, t_proc_fn child, t_parent_fn parent, void *arg);
/* Two processes: a runs here as index 0, b in a child as index 1. */
int t_run_pair(t_proc_fn a, t_proc_fn b, void *arg);

/* Runs fn in a fresh child process and returns its exit status. A process
 * that opened an RDMA device must not fork peers afterwards (rdma-core and
 * libfabric's verbs provider keep per-process state a child cannot use), so
 * a test with several rounds of t_run_pair runs each round isolated. */
int t_run_isolated(int (*fn)(void));

void t_send_blob(int fd, const void *buf, size_t len);
size_t t_recv_blob(int fd, void *buf, size_t cap);
void t_send_u64(int fd, uint64_t v);
uint64_t t_recv_u64(int fd);

/* Exchanges engine addresses over fd and adds the other side as a peer. */
xfer_peer_t t_connect(xfer_engine_t *e, int fd);
/* Sends a region's descriptor; the other side imports it for its peer. */
void t_send_desc(int fd, const xfer_mr_t *mr);
xfer_rmr_t *t_recv_rmr(xfer_engine_t *e, xfer_peer_t peer, int fd);

/* Orders this thread after everything the engine's worker has done so far
 * (a round trip through it). A target that checks its memory after hearing
 * from the initiator over a socket needs this: data lands through the
 * worker, and causality through another process is invisible to
 * ThreadSanitizer. Real receivers learn of data through immediates. */
void t_sync_worker(xfer_engine_t *e);

/* Waits for one completion; fails the test after timeout_ms (scaled). */
struct xfer_cqe t_wait_cqe(xfer_engine_t *e, uint64_t timeout_ms);

/* CLOCK_MONOTONIC in milliseconds. */
uint64_t t_now_ms(void);

/* A busy-poll engine's waits (modes 1 and 2) with nothing to find: a 50 ms
 * xfer_cq_wait and xfer_recv_wait end at their deadline (not before, and
 * not seconds late), and a zero timeout looks once. */
void t_check_wait_deadlines(xfer_engine_t *e);

/* Deterministic bytes: byte i of a stream seeded by `seed`. */
void t_fill(void *buf, size_t len, uint64_t seed);
uint64_t t_rand(uint64_t *state);
uint64_t t_checksum(const void *buf, size_t len);

#endif
