/* xfer-bench internals shared by its modules.
 *
 * Two roles: the initiator runs the matrix, measures and prints; the target
 * only follows the initiator's commands over the control socket. Keeping the
 * target passive is what lets the two run as forked processes, as separate
 * processes in two network namespaces, or on two hosts. */
#ifndef XFER_BENCH_H
#define XFER_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum bench_op { OP_SINGLE, OP_PAGED, OP_IMM, OP_SEND, OP_COUNT };
enum bench_impl { IMPL_XFER, IMPL_RAW, IMPL_UCX, IMPL_MEMCPY, IMPL_COUNT };

extern const char *const bench_op_name[OP_COUNT];
extern const char *const bench_impl_name[IMPL_COUNT];

#define LIST_MAX 32
struct u64_list {
	unsigned n;
	uint64_t v[LIST_MAX];
};

struct bench_opts {
	const char *provider; /* as the user wrote it: tcp, shm, auto, or a full name */
	const char *nics;     /* NULL: tcp uses "lo", others the provider's first */
	unsigned ops;         /* bit per enum bench_op */
	struct u64_list sizes, send_sizes, page_sizes, pages;
	uint32_t window;      /* 0: per-op default */
	uint64_t iters;       /* 0: run for `seconds` */
	double seconds;       /* per row, shared by its rounds */
	unsigned rounds;      /* raw and xfer alternate this many times; medians shown */
	unsigned baselines;   /* bit per enum bench_impl other than IMPL_XFER */
	bool verify, json, trace, raw_transmit, verbose;
	bool raw_unpinned; /* --raw-pin off */
	bool cpu_pin;      /* --cpu-pin on: see bench_layout */
	unsigned busy_poll; /* --busy-poll: the engines' busy_poll (on: 1, or XFER_BUSY_POLL's 2; drive: 2) */
	bool busy_poll_set; /* --busy-poll given: else XFER_BUSY_POLL decides */
	uint32_t telemetry; /* --telemetry: enum bench_telemetry, or TEL_BOTH */
	const char *plot;
	const char *listen, *connect;
};

/* Telemetry of both engines during a case (xfer_engine_telemetry): as
 * created (XFER_TELEMETRY), on or off. --telemetry both measures every xfer
 * row with it on and off, round after round, and compares the two. */
enum bench_telemetry { TEL_KEEP, TEL_ON, TEL_OFF };
#define TEL_BOTH 3

#define BENCH_SLOT_CAP (64ull << 20) /* single writes cycle over this much memory */
#define BENCH_MSG_MAX 8192           /* engine default msg_max; SEND payloads above it fail */

/* One measurement as the initiator describes it to the target. Fixed-width
 * fields only: it crosses the control socket, possibly between hosts. */
struct bench_case {
	uint32_t op, impl;
	uint64_t bytes;  /* message size; page size for paged */
	uint32_t pages;  /* pages per call (paged) */
	uint32_t window; /* calls in flight */
	uint32_t verify;
	uint32_t imm;    /* base of the three immediates the case uses */
	uint64_t seed;   /* data pattern */
	uint32_t telemetry; /* enum bench_telemetry, set on both engines for the case */
	uint32_t reserved;
};

/* Immediate roles within a case: data writes and pings use imm, the target's
 * replies imm+1, the initiator's "stop" imm+2. */
#define IMM_PING(c) ((c)->imm)
#define IMM_PONG(c) ((c)->imm + 1)
#define IMM_STOP(c) ((c)->imm + 2)

/* The raw loop is one busy-polling thread per side; on a small machine two
 * such threads sharing a CPU ping-pong at the scheduler's tick. For its
 * rounds the initiator's thread is pinned to the first allowed CPU and the
 * target's to the last, and restored afterwards. */
enum pin_side { PIN_INITIATOR, PIN_TARGET };
struct pin_state {
	bool pinned;
	unsigned char saved[128]; /* cpu_set_t, kept opaque here */
};
void raw_pin(struct pin_state *p, enum pin_side side);
void raw_unpin(struct pin_state *p);

/* --cpu-pin: the application thread of each side goes where raw_pin puts
 * that side's raw loop (initiator: first allowed CPU, target: last) for the
 * whole run, and its engine's worker to the next one inwards (second,
 * second to last), so that raw and xfer rows share one placement and no
 * two busy threads share a core. Needs 4 allowed CPUs; with fewer it pins
 * nothing and says so. Returns the worker's CPU, or -1 when unpinned. */
int bench_layout(enum pin_side side, bool verbose);

/* ------------------------------------------------------------ statistics */

struct samples {
	uint32_t *v; /* nanoseconds, saturating */
	size_t n, cap;
};
void samples_add(struct samples *s, uint64_t ns);
/* Sorts s, then writes the q-quantiles (0..1) in microseconds; NaN if empty. */
void samples_quantiles(struct samples *s, const double *q, double *out_us, int nq);
void samples_free(struct samples *s);

/* From the engine's trace. OV_ENQ_DEQ is part of OV_ENQ_FIRST: how long the
 * worker took to pick the call up, the rest being the wait for credits.
 * "First post" is when the engine hands the first request to the provider;
 * OV_PROV_POST is how long that provider call itself took. */
enum ov_metric { OV_CALL_ENQ, OV_ENQ_FIRST, OV_POST_ALL, OV_CALL_FIRST, OV_ENQ_DEQ, OV_PROV_POST, OV_COUNT };
extern const char *const ov_name[OV_COUNT];

struct meas {
	uint64_t calls;       /* calls (or round trips) completed while timed */
	uint64_t wrs;         /* write requests among them (pages for paged) */
	uint64_t bytes;       /* payload moved while timed */
	uint64_t t_ns;        /* first timed post to last timed completion */
	double peak_bps;      /* best 10 ms stretch, bytes/s */
	struct samples lat;   /* per call: call to completion, or half a round trip */
	struct samples ov[OV_COUNT]; /* xfer only, from the engine's trace */
	struct samples raw_post;     /* raw only: its fi_writedata calls, one in RAW_POST_EVERY */
	uint64_t posted_all;  /* calls posted in every phase: what the target verifies */
	bool verified;        /* the target checked every byte (--verify) */
	uint64_t sleeps[2];   /* xfer: engine worker sleeps, initiator and target */
};
void meas_free(struct meas *m);
/* The raw loop times one write post in this many, as the engine's trace
 * samples one call in 17: the provider's own post cost, on both sides. */
#define RAW_POST_EVERY 17

uint64_t bench_now_ns(void);
/* xfer_strerror, with -EILSEQ meaning what it means here: wrong bytes. */
const char *bench_strerror(int err);

/* How long a case runs: a fixed number of calls or a duration, each after a
 * short untimed warm-up. */
struct limits {
	uint64_t iters, ns;
	uint64_t warm_iters, warm_ns;
};
void limits_for(const struct bench_opts *o, const struct bench_case *c, struct limits *l);

/* ------------------------------------------------------------- loop drivers */

/* A windowed throughput loop over an implementation. post() starts call `seq`
 * tracked as `slot` (< window) and returns 0, -EAGAIN (retry after a reap) or
 * an error; reap() waits up to ~1 s for completions and returns how many slots
 * it wrote, 0 on timeout, or an error. phase() (optional) learns when the
 * timed part starts (1) and ends (0). */
struct win_ops {
	void *ctx;
	int (*post)(void *ctx, uint64_t seq, uint32_t slot);
	int (*reap)(void *ctx, uint32_t *slots, int max);
	void (*phase)(void *ctx, int timed);
	uint64_t bytes_per_call, wrs_per_call;
};
int drive_window(const struct win_ops *o, uint32_t window, const struct limits *lim,
		 struct meas *m);

/* A ping-pong loop: ping() sends, pong() waits for the answer; stop() tells
 * the target the loop is over. Latency is half the round trip. */
struct pp_ops {
	void *ctx;
	int (*ping)(void *ctx, uint64_t seq);
	int (*pong)(void *ctx);
	int (*stop)(void *ctx);
	void (*phase)(void *ctx, int timed);
	uint64_t bytes;
};
int drive_pingpong(const struct pp_ops *o, const struct limits *lim, struct meas *m);

/* --------------------------------------------------------- data and layout */

/* Where a case's bytes live: single writes cycle over nslots slots of `bytes`
 * each; paged writes scatter page sp[i] of the source to page dp[i] of the
 * destination. */
struct layout {
	uint64_t src_len, dst_len;
	uint32_t nslots;
	uint32_t *sp, *dp; /* paged only */
};
int layout_make(const struct bench_case *c, struct layout *l);
void layout_free(struct layout *l);
uint64_t layout_slot_off(const struct bench_case *c, const struct layout *l, uint64_t seq);

void *bench_alloc(size_t len); /* page-aligned, zeroed, touched */
void bench_free(void *p, size_t len);
void pattern_fill(uint8_t *buf, uint64_t off, uint64_t len, uint64_t seed);
/* -1 when buf holds the pattern of [off, off+len), else the first bad index. */
int64_t pattern_check(const uint8_t *buf, uint64_t off, uint64_t len, uint64_t seed);
/* Checks the target's buffer after `calls` calls; 0 or -EILSEQ (and says where). */
int verify_dst(const struct bench_case *c, const struct layout *l, uint8_t *dst, uint64_t calls);

#endif
