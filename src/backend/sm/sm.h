/* xfer's own same-host backend ("shm"): one NIC is a listening unix socket;
 * every directed pair of NICs is a connection (SOCK_SEQPACKET, for setup,
 * wake-ups and death) plus a shared segment with request and completion
 * rings (sm_seg.h). The TARGET applies every request itself, after checking
 * its key and bounds against its own live registrations (sm_keys.h); it
 * takes payloads inline from the segment or pulls them from the initiator
 * with process_vm_readv, and answers each request with a completion, so a
 * writer learns of every rejected write (delivery-complete). Everything here
 * runs on the NIC's worker thread (close and stop-time dereg: after it
 * exited). Private to src/backend/sm/. */
#ifndef XFER_SM_H
#define XFER_SM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "backend/backend.h"
#include "backend/sm/sm_keys.h"
#include "backend/sm/sm_seg.h"
#include "backend/sm/sm_wire.h"

/* Connections per NIC, both directions; peers past it are refused. */
#define SM_MAX_CONNS 4096u
/* Requests a target applies with one process_vm_readv. */
#define SM_BATCH 64u
/* Payload bytes a target moves per poll and connection before it lets the
 * worker do other work (a 64 MiB write is applied in pieces). */
#define SM_POLL_BYTES (8u << 20)
/* How often a busy worker looks at its sockets (new peers, deaths). */
#define SM_CTL_NS 1000000ull
/* A connection that has not been answered by then is given up. */
#define SM_CONNECT_NS 10000000000ull

enum sm_role { SM_INITIATOR, SM_TARGET };

enum sm_state {
	SM_CONNECTING, /* initiator: hello sent, no ack yet; target: no hello yet */
	SM_READY,
	SM_BROKEN, /* initiator: the peer is gone; requests fail, the handle stays until av_remove */
};

/* What the initiator knows of one request slot. */
struct sm_slot {
	void *ctx;    /* the core's context; NULL for a staged piece that is not the last */
	uint64_t seq; /* ring position of the request in the slot */
	bool busy;
	bool staged;  /* the last piece of a staged request: reports the pieces' first error */
};

/* A request staged through the slots in pieces (no CMA), initiator side. */
struct sm_stage {
	bool active;
	uint8_t op;
	bool has_imm;
	uint32_t imm;
	void *ctx;
	const uint8_t *src;
	uint64_t len, off, raddr, rkey;
	int err; /* first error of a piece, reported with the last */
};

/* A staged request being assembled, target side. */
struct sm_assembly {
	bool active;
	uint8_t op;
	uint64_t total, off, raddr;
	int status;
	void *recv_ctx; /* SEND: the receive buffer it fills */
	uint8_t *recv_buf;
	size_t recv_len;
};

/* A SEND consumed from a ring while no receive buffer was posted. Its
 * payload stays where it was (slot or initiator memory): the initiator does
 * not reuse either before the completion. */
struct sm_defer {
	struct sm_conn *c;
	uint64_t seq;
	struct sm_req_view v;
	struct sm_defer *next;
};

struct sm_conn {
	struct sm_nic *nic;
	uint8_t role, state;
	int fd;
	uint32_t handle; /* index in the NIC's handle table (initiators) */
	uint32_t list_idx; /* index in the NIC's list of its role */
	pid_t pid;       /* the peer process (SO_PEERCRED) */
	bool cma;        /* payloads above SM_INLINE go by process_vm_readv */
	int fail;        /* initiator, SM_BROKEN: the status of what is left */
	bool removed;    /* initiator: av_remove ran; freed once no slot is busy */
	bool kick;       /* published since the last wake check */
	bool sweep;      /* initiator: listed for the failure sweep */
	bool blocked;    /* target: a staged SEND waits for a receive buffer */
	bool bad;        /* target: the initiator broke the protocol; dropped after this poll */
	uint64_t since_ns;
	struct sm_seg_hdr *seg; /* NULL once unmapped */
	struct sm_req *reqs;
	struct sm_cmp *cmps;
	uint8_t *data;
	/* initiator */
	uint64_t tail, cmp_head;
	uint32_t busy;
	struct sm_slot *slots;
	struct sm_stage stage;
	/* target */
	uint64_t pos, cmp_tail, cmp_head_seen;
	uint64_t piece_off; /* progress through the request at pos (large CMA writes) */
	int piece_err;      /* target: a piece of that request failed; initiator: a staged piece did */
	struct sm_assembly as;
	struct sm_defer *defers; /* one per slot */
	uint32_t ndefer;
};

struct sm_recv {
	uint8_t *buf;
	size_t len;
	void *ctx;
};

/* A CMA request waiting in the current batch. */
struct sm_pull {
	uint64_t seq;
	uint64_t len;    /* bytes of this piece */
	bool last;       /* the request is complete with this piece */
	bool has_imm;
	uint32_t imm;
};

struct sm_nic {
	struct xfer_nic *nic;
	int lfd, ep;
	struct sm_addr addr;
	uid_t uid;
	bool cma_allowed; /* XFER_SM_CMA is not 0 */
	struct sm_keys keys;
	/* Initiated connections by handle (dest = generation << 32 | index). */
	struct sm_conn *handles[SM_MAX_CONNS];
	uint32_t gen[SM_MAX_CONNS];
	struct sm_conn *ini[SM_MAX_CONNS], *tgt[SM_MAX_CONNS];
	uint32_t nini, ntgt, rr_ini, rr_tgt;
	struct sm_conn *kicks[2 * SM_MAX_CONNS];
	uint32_t nkicks;
	struct sm_conn *sweeps[SM_MAX_CONNS];
	uint32_t nsweeps;
	uint32_t nconnecting; /* both roles, for the setup deadline */
	uint32_t nacks;       /* initiators waiting for their ack: sockets checked every poll */
	/* Posted receives, oldest first. */
	struct sm_recv *recvs;
	uint32_t rhead, rcount, rcap;
	/* SENDs waiting for a receive, oldest first (all connections). */
	struct sm_defer *dhead, *dtail;
	bool armed; /* trywait set the sleeping flags */
	uint32_t polls;
	uint64_t last_ctl_ns;
	bool cma_logged;
	/* The current batch of pulls (one connection at a time). */
	struct sm_conn *batch_conn;
	uint32_t nbatch;
	struct iovec liov[SM_BATCH], riov[SM_BATCH];
	struct sm_pull pulls[SM_BATCH];
};

/* An event buffer being filled by poll. */
struct sm_evbuf {
	struct nic_event *ev;
	int n, max;
};

static inline bool sm_ev_full(const struct sm_evbuf *b)
{
	return b->n >= b->max;
}

static inline void sm_ev_tx(struct sm_evbuf *b, void *ctx, int status)
{
	b->ev[b->n++] = (struct nic_event){.type = NIC_EV_TX, .status = status, .ctx = ctx};
}

uint64_t xi_sm_now_ns(void);

/* sm_setup.c: listening, connecting, accepting, hello and ack. */
int xi_sm_listen(struct sm_nic *s);
int xi_sm_connect(struct sm_nic *s, const struct sm_addr *a, struct sm_conn **out);
void xi_sm_accept_all(struct sm_nic *s);
/* The first message on an accepted connection; false when c was refused
 * (and dropped). */
bool xi_sm_on_hello(struct sm_conn *c, const uint8_t *msg, size_t len, const int *fds, int nfds);
/* The target's answer; false when c was refused (and broken). */
bool xi_sm_on_ack(struct sm_conn *c, const uint8_t *msg, size_t len);

/* sm_conn.c: socket events, teardown, wake-ups. */
int xi_sm_epoll_add(struct sm_nic *s, int fd, void *ptr);
void xi_sm_list_add(struct sm_conn **list, uint32_t *n, struct sm_conn *c);
void xi_sm_close_socket(struct sm_conn *c);
/* Looks at every socket with news: new peers, hellos, acks, wake-ups, deaths. */
void xi_sm_control(struct sm_nic *s);
/* Initiator side: the peer is gone or broke the protocol; what is in flight
 * to it fails with status (after the completions it already wrote). */
void xi_sm_conn_break(struct sm_conn *c, int status);
/* Target side: forget the connection (its requests are dropped). */
void xi_sm_conn_drop(struct sm_conn *c);
/* Lists an initiator connection for the sweep of the next poll: what is
 * left in flight fails, and a removed one is freed. */
void xi_sm_conn_sweep_later(struct sm_conn *c);
/* Unmaps c's segment (nothing of it is read after this). */
void xi_sm_conn_unmap(struct sm_conn *c);
/* Frees an initiator connection whose handle is gone and slots are idle. */
void xi_sm_conn_free(struct sm_conn *c);
void xi_sm_close_all(struct sm_nic *s);
/* Sends one wake-up byte to the peer of c (it set its sleeping flag). */
void xi_sm_wake(struct sm_conn *c);
void xi_sm_kick(struct sm_conn *c);
/* Wakes every sleeping consumer we published to since the last call. */
void xi_sm_flush_kicks(struct sm_nic *s);

/* sm_tx.c: the initiator side. */
struct sm_conn *xi_sm_conn_of(struct sm_nic *s, uint64_t dest);
int xi_sm_post(struct sm_conn *c, uint8_t op, const void *buf, uint64_t len, uint64_t raddr,
	       uint64_t rkey, bool has_imm, uint32_t imm, void *ctx);
/* Completions the peer wrote, then the pieces of a staged request. */
void xi_sm_reap(struct sm_conn *c, struct sm_evbuf *b);
/* Fails what is left on a broken or removed connection; true when idle. */
bool xi_sm_sweep(struct sm_conn *c, struct sm_evbuf *b);

/* sm_rx.c: the target side. */
void xi_sm_serve(struct sm_conn *c, struct sm_evbuf *b);
/* Hands SENDs that waited to receive buffers posted since. */
void xi_sm_match_defers(struct sm_nic *s, struct sm_evbuf *b);
/* Drops c's waiting SENDs (c is going away). */
void xi_sm_forget_defers(struct sm_conn *c);

#endif
