/* Both roles' entry points (xfer_bench.c and bench_target.c). */
#ifndef XFER_BENCH_TARGET_H
#define XFER_BENCH_TARGET_H

#include "bench.h"
#include "bench_ctl.h"

struct rside;

/* Serves the initiator on ctl until BYE; returns the process exit status. */
int target_main(const struct bench_opts *o, struct ctl *ctl);
/* Exchanges raw endpoint names; r NULL says this side has none (-ENODEV). */
int raw_handshake(struct rside *r, struct ctl *ctl);
/* Closes r after a failed handshake, says so, returns NULL. */
struct rside *raw_drop(struct rside *r);

#endif
