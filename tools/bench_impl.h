/* The implementations xfer-bench measures, each behind the same shape:
 * open once per process, then one call per case on each side. Initiator
 * calls measure into a struct meas; target calls serve until the initiator
 * says it is done and report what they checked. */
#ifndef XFER_BENCH_IMPL_H
#define XFER_BENCH_IMPL_H

#include "bench.h"
#include "bench_ctl.h"

/* xfer, through the public API only. */
struct xside;
/* worker_cpu: -1 unpinned; busy_poll: -1 keeps XFER_BUSY_POLL's choice. */
int xside_open(struct xside **out, const char *provider, const char *nics, int worker_cpu, int busy_poll);
/* Whether the engine runs in busy-poll completion mode. */
unsigned xside_busy_poll(const struct xside *x); /* the engine's busy_poll: 0, 1, 2 */
int xside_connect(struct xside *x, struct ctl *ctl);
const char *xside_provider(const struct xside *x);
const char *xside_nic(const struct xside *x, unsigned i);
unsigned xside_nic_count(const struct xside *x);
/* Whether the engine's writes complete only once delivered (it asks the
 * provider for FI_DELIVERY_COMPLETE where that works). */
bool xside_delivery_complete(const struct xside *x);
/* Forgets the peer: called before either side says goodbye. */
void xside_disconnect(struct xside *x);
void xside_close(struct xside *x);
int xfer_init_case(struct xside *x, struct ctl *ctl, const struct bench_case *c,
		   const struct limits *lim, bool trace, struct meas *m);
int xfer_target_case(struct xside *x, struct ctl *ctl, const struct bench_case *c);

/* The raw libfabric loop: same provider and NICs as the engine chose. */
struct rside;
/* dc: ask for delivery-complete (as the engine does where it works);
 * otherwise the provider's default completion. */
int rside_open(struct rside **out, const char *provider, const char *const *nics, unsigned nnics,
	       bool dc);
int rside_connect(struct rside *r, struct ctl *ctl);
const char *rside_completion(const struct rside *r);
void rside_close(struct rside *r);
/* trace: time one write post in RAW_POST_EVERY (m->raw_post), as the
 * engine's trace does its calls; off with --no-trace, like the engine's. */
int raw_init_case(struct rside *r, struct ctl *ctl, const struct bench_case *c,
		  const struct limits *lim, bool trace, struct meas *m);
int raw_target_case(struct rside *r, struct ctl *ctl, const struct bench_case *c);

/* ucx_perftest, run as two processes. */
struct ucx_result {
	double gbps, mops, p50_us; /* NaN when not reported */
	uint64_t iters;
	char note[64];
};
bool ucx_available(void);
/* Initiator: asks the target to start the server, runs the client, parses. */
int ucx_run(struct ctl *ctl, const char *host, const char *provider, const char *nic,
	    const struct bench_case *c, double seconds, struct ucx_result *out);
/* Target side of MSG_UCX_START and MSG_UCX_WAIT. */
int ucx_serve(struct ctl *ctl, const struct ctl_ucx *req, const char *nic);
int ucx_serve_wait(struct ctl *ctl);

/* One core copying the same bytes the single-write case moves. */
int memcpy_run(const struct bench_case *c, const struct limits *lim, struct meas *m);

#endif
