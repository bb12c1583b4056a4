/* The state decoders and prefillers share (kv_core.c runs it; kv_peers.c
 * and kv_send.c work on parts of it). Kept apart from kv_core.h so that
 * those modules see the struct without including the control thread's
 * functions, which call them: no include cycle. */
#ifndef XFER_KV_STATE_H
#define XFER_KV_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv_inbox.h"
#include "xfer.h"

/* A message waiting for its SEND to complete (the engine reads it until then). */
struct kv_sendbuf {
	struct kv_sendbuf *next; /* pending list, while it cannot be submitted */
	xfer_peer_t peer;
	uint32_t type;
	uint64_t dseq;
	uint64_t engine_id; /* of the receiver */
	size_t len;
	uint8_t data[];
};

struct kv_peer_ent {
	uint64_t id;
	xfer_peer_t peer;
	bool dead;
	uint8_t *addr; /* as first added, to recognise it before adding again */
	size_t addr_len;
};

struct kv_core {
	xfer_engine_t *e;
	struct xfer_attr attr;
	struct kv_inbox in;
	pthread_mutex_t mu;      /* the owner's state */
	pthread_cond_t app_cv;   /* events for the application, under mu */
	pthread_cond_t credit_cv; /* an inbox credit came back, under mu */
	uint32_t credit_waiters;
	bool stopping; /* under mu: the engine is being stopped, touch it no more */
	pthread_t thread;
	bool thread_started;
	uint32_t downs_seen; /* peer failures handled (control thread) */
	struct kv_sendbuf *pend_head, *pend_tail;
	xfer_recv_fn app_recv;
	void *app_recv_ctx;
	xfer_peer_down_fn app_down;
	void *app_down_ctx;
	struct kv_peer_ent *peers; /* engines we talk to, by engine id */
	uint32_t npeers, peers_cap;
	/* The owner's handlers, called by the control thread with mu held. */
	void (*on_item)(void *owner, const struct kv_item *it);
	/* Timers; returns the next time (ns) it wants to run. */
	uint64_t (*on_tick)(void *owner, uint64_t now);
	void *owner;
};

#endif
