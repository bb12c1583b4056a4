/* Where a GPU copy's time goes, when XFER_GPU_TRACE is set (it costs one
 * branch per stage when unset): one record per kernel launch (a batch of
 * calls) or copy-engine copy, stamped with CLOCK_MONOTONIC on the worker at
 * each stage, and with the GPU's %globaltimer by the kernel itself at each
 * CTA's start and end. At xi_gpu_destroy a summary (percentiles per stage)
 * goes to the log at info level; XFER_GPU_TRACE=<path> also writes every
 * record there as CSV (XFER_GPU_TRACE=1: summary only).
 *
 * The GPU clock is compared with the host's CLOCK_REALTIME (stamped beside
 * the monotonic one), which is what %globaltimer follows on Linux drivers;
 * launch-to-start figures are only as good as that agreement (the summary
 * says so), while GPU-only figures (kernel time, idle gap between kernels)
 * and host-only ones need no agreement at all. */
#ifndef XFER_GPU_TRACE_H
#define XFER_GPU_TRACE_H

#include <stdbool.h>
#include <stdint.h>

struct cuda_api;

enum xi_trace_kind { XI_TRACE_KERNEL, XI_TRACE_ENGINE };

struct xi_trace_rec {
	uint64_t t_open;      /* first call added (kernel) / copy begun (engine) */
	uint64_t t_launch;    /* just before cuLaunchKernel / the engine's first piece */
	uint64_t t_launched;  /* it returned / the last piece returned */
	uint64_t t_recorded;  /* cuEventRecord returned */
	uint64_t t_done;      /* the worker saw it finished */
	uint64_t rt_launched; /* CLOCK_REALTIME at t_launched */
	uint64_t rt_done;     /* CLOCK_REALTIME at t_done */
	uint64_t gpu_start, gpu_end; /* earliest CTA start, latest CTA end (kernels) */
	/* The latest CTA start, the earliest and the mean CTA end: how long
	 * the grid takes to get going, and how long its last CTAs run after
	 * most are done (a static split's tail). */
	uint64_t gpu_last_start, gpu_first_end, gpu_mean_end;
	uint64_t bytes;
	uint32_t calls, items, ctas;
	uint8_t kind;
	bool done;
};

struct xi_gpu_trace;

/* NULL unless XFER_GPU_TRACE is set (or its buffers cannot be had). */
struct xi_gpu_trace *xi_gpu_trace_create(const struct cuda_api *c, unsigned max_ctas);
/* Summary to the log (and CSV), then frees; c must still be usable. */
void xi_gpu_trace_destroy(struct xi_gpu_trace *t);
/* A new record of kind, t_open stamped: its index (records are a ring). */
uint32_t xi_gpu_trace_open(struct xi_gpu_trace *t, enum xi_trace_kind kind);
struct xi_trace_rec *xi_gpu_trace_rec(struct xi_gpu_trace *t, uint32_t rec);
/* Device address of the per-CTA timer slots of record rec (its kernel of
 * ctas CTAs, at most max_ctas, writes them), cleared first. */
uint64_t xi_gpu_trace_slots(struct xi_gpu_trace *t, uint32_t rec, unsigned ctas);
/* Record rec's copy finished (first report wins): t_done, GPU times. */
void xi_gpu_trace_done(struct xi_gpu_trace *t, uint32_t rec);
/* One cuEventQuery took ns, finished or not. */
void xi_gpu_trace_query(struct xi_gpu_trace *t, uint64_t ns, bool ready);
uint64_t xi_gpu_trace_now(void);
uint64_t xi_gpu_trace_realtime(void);

#endif
