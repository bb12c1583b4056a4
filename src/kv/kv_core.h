/* What decoders and prefillers share: the engine they create, the inbox that
 * carries everything the engine's worker tells them (messages, completions,
 * peer failures) to their own control thread, and message sending.
 *
 * Threads: engine callbacks run on the worker and must not block, so they
 * only copy into the inbox. The control thread and the application's calls
 * take `mu`; they may call blocking engine functions (registration, peers,
 * disarm), which never wait for `mu`, so nothing can deadlock. */
#ifndef XFER_KV_CORE_H
#define XFER_KV_CORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv_wire.h"
#include "xfer.h"

enum kv_item_kind { KV_IT_MSG = 1, KV_IT_CQE = 2, KV_IT_PEER_DOWN = 3 };

struct kv_item {
	struct kv_item *next;
	uint32_t kind;
	uint64_t src_id;   /* MSG: sender; PEER_DOWN: engine id */
	uint32_t peer;     /* PEER_DOWN */
	struct xfer_cqe cqe; /* CQE */
	size_t len;        /* MSG */
	uint8_t data[];
};

/* A message waiting for its SEND to complete (the engine reads it until then). */
struct kv_sendbuf {
	struct kv_sendbuf *next; /* pending list, while -EAGAIN */
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
	pthread_mutex_t mu;      /* the owner's state */
	pthread_cond_t app_cv;   /* events for the application, under mu */
	pthread_mutex_t in_mu;   /* the inbox only */
	pthread_cond_t in_cv;
	struct kv_item *in_head, *in_tail;
	bool kicked, stop;
	bool stopping; /* under mu: the engine is being stopped, touch it no more */
	pthread_t thread;
	bool thread_started;
	struct kv_sendbuf *pend_head, *pend_tail;
	xfer_recv_fn app_recv;
	void *app_recv_ctx;
	xfer_peer_down_fn app_down;
	void *app_down_ctx;
	uint64_t dropped; /* malformed or unaccountable inbox items */
	struct kv_peer_ent *peers; /* engines we talk to, by engine id */
	uint32_t npeers, peers_cap;
	/* The owner's handlers, called by the control thread with mu held. */
	void (*on_item)(void *owner, const struct kv_item *it);
	/* Timers; returns the next time (ns) it wants to run. */
	uint64_t (*on_tick)(void *owner, uint64_t now);
	void *owner;
};

uint64_t xi_kv_now_ns(void);

/* Creates the engine (with the module's hooks) and the control thread. */
int xi_kv_core_start(struct kv_core *c, const struct xfer_attr *attr);
/* Stops the engine, then the thread; drops what is left in the inbox. */
void xi_kv_core_stop(struct kv_core *c);
/* Wakes the control thread (work that needs retrying, a new deadline). */
void xi_kv_core_kick(struct kv_core *c);

/* Completion target for every operation the module submits: user_data is
 * the owner's, the item goes to the inbox. */
void xi_kv_core_cb(void *ctx, const struct xfer_cqe *cqe);
struct xfer_completion xi_kv_completion(struct kv_core *c, uint64_t user_data, uint64_t tag,
				     uint64_t timeout_ms);

/* Encodes and sends m to peer; a full queue is retried by the control
 * thread. Returns 0 or the submission error. Call with mu held. */
int xi_kv_send(struct kv_core *c, xfer_peer_t peer, const struct kv_msg *m, const uint32_t *pages);
/* Retries pending sends; true while some remain. Call with mu held. */
bool xi_kv_send_pending(struct kv_core *c);

/* The peer with this engine id, adding it from addr when unknown (and
 * checking that the address is the sender's). -EBUSY for an engine
 * declared dead whose old peer is still being drained. Call with mu held
 * (kv_peers.c). */
int xi_kv_peer_for(struct kv_core *c, uint64_t engine_id, const uint8_t *addr, size_t len,
		xfer_peer_t *out);
/* Adds a peer from its address (join); the table learns its engine id. */
int xi_kv_peer_add(struct kv_core *c, const void *addr, size_t len, xfer_peer_t *out);
void xi_kv_peer_mark_dead(struct kv_core *c, xfer_peer_t peer);
void xi_kv_peers_free(struct kv_core *c);
/* Removes dead or unneeded peers once nothing is in flight to them; true
 * while some could not be removed yet. `keep` says which are still wanted. */
bool xi_kv_peer_reap(struct kv_core *c, bool (*keep)(void *owner, xfer_peer_t peer));

#endif
