/* What decoders and prefillers share: the engine they create, the control
 * thread that handles everything the engine's worker tells them (through the
 * inbox, kv_inbox.h), and the owner's lock.
 *
 * Threads: engine callbacks run on the worker and only copy into the inbox
 * (no allocation, no lock). The control thread and the application's calls
 * take `mu`; they may call blocking engine functions (registration, peers,
 * disarm), which never wait for `mu`, so nothing can deadlock. */
#ifndef XFER_KV_CORE_H
#define XFER_KV_CORE_H

#include <pthread.h>
#include <stdbool.h>
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

uint64_t xi_kv_now_ns(void);

/* Creates the inbox, the engine (with the module's hooks) and the control
 * thread. The inbox holds as many completions as the engine itself can hold
 * submissions (submit_depth + max_ops), and one NIC's worth of messages. */
int xi_kv_core_start(struct kv_core *c, const struct xfer_attr *attr);
/* Stops the engine, then the thread; drops what is left in the inbox. */
void xi_kv_core_stop(struct kv_core *c);
/* Wakes the control thread (work that needs retrying, a new deadline). */
void xi_kv_core_kick(struct kv_core *c);
/* Waits (mu held, released while waiting) until an inbox credit is free:
 * for an application call whose submission must not be refused. 0, or
 * -ESHUTDOWN once the module stops. */
int xi_kv_core_wait_credit(struct kv_core *c);
/* Waits (mu held) until *count is not 0 or timeout_ms passes: the
 * application's poll for the owner's events. */
void xi_kv_core_wait_events(struct kv_core *c, const uint32_t *count, uint64_t timeout_ms);
/* Messages the inbox had no room for. */
uint64_t xi_kv_core_dropped(struct kv_core *c);

#endif
