/* The fault suite's harness: three processes. The initiator (this process)
 * works against a target, to which the case does something bad, and against
 * a stable peer that must keep working throughout. The target's region is
 * fenced by guard bytes that must never change. Every case checks that each
 * operation completes exactly once and every wait returns by its deadline. */
#ifndef XFER_FAULT_HARNESS_H
#define XFER_FAULT_HARNESS_H

#include "../helpers.h"

#define F_REGION (1u << 20)
#define F_GUARD 4096u
#define F_GUARD_BYTE 0xC3

struct fault_init {
	xfer_engine_t *e;
	int fd_t, fd_s;
	xfer_peer_t t, s;
	xfer_rmr_t *t_rmr, *s_rmr;
	xfer_mr_t *src;
	uint8_t *src_buf; /* F_REGION bytes, filled with pattern seed 1 */
	uint32_t stable_round;
};

struct fault_target {
	xfer_engine_t *e;
	int fd;
	xfer_peer_t init;
	xfer_mr_t *mr;
	uint8_t *buf; /* F_REGION + 2 guards; the region is buf + F_GUARD */
};

struct fault_case {
	const char *name;
	int (*initiator)(struct fault_init *f);
	int (*target)(struct fault_target *t);
	void (*tweak_attr)(struct xfer_attr *a, int role); /* role 0 initiator, 1 target, 2 stable */
	int (*prepare)(void); /* before any process starts; nonzero skips (77) */
	/* Run in the stable peer's process when the initiator sends it
	 * F_STABLE_HOOK (a third party that the target never added); fd is the
	 * initiator's socket. */
	int (*stable)(int fd);
};

#define F_STABLE_HOOK UINT64_MAX

/* Runs a case; returns the process exit code. */
int fault_run(const struct fault_case *c);

/* Commands to the stable peer besides its own rounds: arm one arrival of
 * immediate (cmd & 0xffffffff) and, with STABLE_VERIFY, check that its
 * region's first 4096 bytes hold t_fill(seed = that immediate). Send the
 * command, wait for its echo (armed), write, wait for the second echo. */
#define STABLE_EXPECT (1ull << 63)
#define STABLE_VERIFY (1ull << 62)

/* One verified write + immediate to the stable peer. */
void stable_check(struct fault_init *f);

/* Collects exactly `n` completions, failing on a duplicate user_data or a
 * wait past timeout_ms (scaled, t_time_scale); the results land in
 * res[user_data - base]. */
void reap_exactly(xfer_engine_t *e, uint64_t base, uint32_t n, int32_t *res, uint64_t timeout_ms);
/* No completion arrives within ms. */
void reap_none(xfer_engine_t *e, uint64_t ms);

/* Guards around the target's region are intact. */
void check_guards(const struct fault_target *t);
uint64_t ms_since(uint64_t start_ns);
uint64_t mono_ns(void);

#endif
