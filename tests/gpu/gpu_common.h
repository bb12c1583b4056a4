// Shared by the GPU tests and benchmark: CUDA error checks, a fork-safe GPU
// probe, and an address/descriptor exchange over a socket pair.
#pragma once
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xfer.h"

// xfer-gpu-bench's staged rows (gpu_bench_staged.cu), XFER_BENCH_ONLY=staged.
int staged_bench_main(void);
// Its ceiling rows (gpu_bench_ceiling.cu): XFER_BENCH_ONLY=ceiling runs them
// alone; XFER_BENCH_CEILING=1 (ceiling_wanted) after the staged rows, in
// their two processes: ceiling_side with leads=1 in one (host_gbs: the
// staged rows' host GB/s, or NULL; returns the rows failing verification),
// leads=0 in the other, over one socket.
int ceiling_bench_main(void);
bool ceiling_wanted(void);
int ceiling_side(int fd, int leads, const double *host_gbs);

#define CK(x)                                                                                \
	do {                                                                                 \
		cudaError_t e_ = (x);                                                        \
		if (e_ != cudaSuccess) {                                                     \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,           \
				cudaGetErrorString(e_));                                     \
			exit(1);                                                             \
		}                                                                            \
	} while (0)
#define XK(x)                                                                                \
	do {                                                                                 \
		int r_ = (x);                                                                \
		if (r_ < 0) {                                                                \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,           \
				xfer_strerror(r_));                                          \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

// CUDA must not be initialised before fork(): count GPUs in a throwaway child.
static inline int gpu_count_forksafe(void)
{
	pid_t p = fork();
	if (p == 0) {
		int n = 0;
		if (cudaGetDeviceCount(&n) != cudaSuccess)
			n = 0;
		_exit(n > 100 ? 100 : n);
	}
	int st = 0;
	waitpid(p, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

// Runs lead(fd) and other(fd) in two child processes joined by a socket
// pair (other forked first, so that it waits on the socket when lead
// starts); each child's stdout is flushed before it exits with its
// function's return value. Returns 0 when both exit 0, else 1 after saying
// so with what, lead_name and other_name.
static inline int run_two(int (*lead)(int), int (*other)(int), const char *what, const char *lead_name,
			  const char *other_name)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid_t po = fork();
	if (po == 0) {
		int rc = other(sv[1]);
		fflush(stdout);
		_exit(rc);
	}
	pid_t pl = fork();
	if (pl == 0) {
		int rc = lead(sv[0]);
		fflush(stdout);
		_exit(rc);
	}
	int sl = 0, so = 0;
	waitpid(pl, &sl, 0);
	waitpid(po, &so, 0);
	if (!WIFEXITED(sl) || WEXITSTATUS(sl) || !WIFEXITED(so) || WEXITSTATUS(so)) {
		fprintf(stderr, "%s run failed (%s %d, %s %d)\n", what, lead_name, sl, other_name, so);
		return 1;
	}
	return 0;
}

static inline void put_blob(int fd, const void *b, size_t n)
{
	if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || write(fd, b, n) != (ssize_t)n)
		exit(1);
}

static inline size_t get_blob(int fd, void *b, size_t cap)
{
	size_t n = 0, got = 0;
	if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || n > cap)
		exit(1);
	while (got < n) {
		ssize_t r = read(fd, (char *)b + got, n - got);
		if (r <= 0)
			exit(1);
		got += (size_t)r;
	}
	return n;
}

static inline xfer_engine_t *gpu_engine(int fd, xfer_peer_t *peer)
{
	struct xfer_attr a;
	xfer_attr_init(&a);
	const char *p = getenv("XFER_TEST_PROVIDER");
	a.provider = p && *p ? p : "tcp";
	if (!strcmp(a.provider, "tcp"))
		a.nics = "lo";
	xfer_engine_t *e;
	XK(xfer_engine_create(&a, &e));
	uint8_t addr[XFER_ADDR_MAX];
	int len = xfer_engine_addr(e, addr, sizeof(addr), NULL);
	XK(len);
	put_blob(fd, addr, (size_t)len);
	size_t n = get_blob(fd, addr, sizeof(addr));
	XK(xfer_peer_add(e, addr, n, peer));
	return e;
}

static inline struct xfer_cqe gpu_wait(xfer_engine_t *e)
{
	struct xfer_cqe c;
	int n = xfer_cq_wait(e, &c, 1, 60000);
	if (n != 1) {
		fprintf(stderr, "no completion: %s\n", xfer_strerror(n));
		exit(1);
	}
	return c;
}

static inline void send_u64(int fd, uint64_t v)
{
	put_blob(fd, &v, sizeof(v));
}

static inline uint64_t recv_u64(int fd)
{
	uint64_t v = 0;
	get_blob(fd, &v, sizeof(v));
	return v;
}
