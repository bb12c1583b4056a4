/* The GPU path's stage trace (gpu_trace.h). Off the data path unless asked
 * for: the records live in a preallocated ring, the kernel's timer slots in
 * pinned host memory it writes through the bus; the summary's sorting and
 * printing happen once, at teardown. */
#include "gpu/gpu_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu/cuda_api.h"
#include "util/log.h"

#define TRACE_RECS 16384u
/* Kernel records whose timer slots may be in use at once: at most one per
 * copy in flight (XI_GPU_RING), with room to spare. */
#define TRACE_SLOTS 512u

struct xi_gpu_trace {
	const struct cuda_api *c;
	char path[256];
	struct xi_trace_rec *rec;
	uint64_t n; /* records opened */
	uint64_t *slots; /* pinned: TRACE_SLOTS x 2 x max_ctas */
	CUdeviceptr slots_dev;
	unsigned max_ctas;
	uint64_t queries, queries_ready, query_ns, query_ready_ns;
};

uint64_t xi_gpu_trace_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xi_gpu_trace_realtime(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct xi_gpu_trace *xi_gpu_trace_create(const struct cuda_api *c, unsigned max_ctas)
{
	const char *v = getenv("XFER_GPU_TRACE");
	if (!v || !*v || !strcmp(v, "0"))
		return NULL;
	struct xi_gpu_trace *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->rec = calloc(TRACE_RECS, sizeof(*t->rec));
	t->c = c;
	t->max_ctas = max_ctas ? max_ctas : 1;
	if (strcmp(v, "1"))
		snprintf(t->path, sizeof(t->path), "%s", v);
	size_t slot_bytes = (size_t)TRACE_SLOTS * 2 * t->max_ctas * sizeof(uint64_t);
	if (!t->rec || c->cuMemHostAlloc((void **)&t->slots, slot_bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) ||
	    c->cuMemHostGetDevicePointer(&t->slots_dev, t->slots, 0)) {
		xwarn("XFER_GPU_TRACE: no memory for the trace; tracing off");
			free(t->rec);
		free(t);
		return NULL;
	}
	xinfo("XFER_GPU_TRACE: tracing the GPU copy path (%u records kept)", TRACE_RECS);
	return t;
}

uint32_t xi_gpu_trace_open(struct xi_gpu_trace *t, enum xi_trace_kind kind)
{
	uint32_t i = (uint32_t)(t->n++ % TRACE_RECS);
	t->rec[i] = (struct xi_trace_rec){.t_open = xi_gpu_trace_now(), .kind = (uint8_t)kind};
	return i;
}

struct xi_trace_rec *xi_gpu_trace_rec(struct xi_gpu_trace *t, uint32_t rec)
{
	return &t->rec[rec % TRACE_RECS];
}

static uint64_t *slots_of(struct xi_gpu_trace *t, uint32_t rec)
{
	return t->slots + (size_t)(rec % TRACE_SLOTS) * 2 * t->max_ctas;
}

uint64_t xi_gpu_trace_slots(struct xi_gpu_trace *t, uint32_t rec, unsigned ctas)
{
	memset(slots_of(t, rec), 0, 2 * (ctas < t->max_ctas ? ctas : t->max_ctas) * sizeof(uint64_t));
	return t->slots_dev + (uint64_t)((uint8_t *)slots_of(t, rec) - (uint8_t *)t->slots);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

void xi_gpu_trace_done(struct xi_gpu_trace *t, uint32_t rec)
{
	struct xi_trace_rec *r = xi_gpu_trace_rec(t, rec);
	if (r->done)
		return;
	r->done = true;
	r->t_done = xi_gpu_trace_now();
	r->rt_done = xi_gpu_trace_realtime();
	if (r->kind != XI_TRACE_KERNEL || !r->ctas)
		return;
	const volatile uint64_t *s = slots_of(t, rec);
	uint64_t lo = UINT64_MAX, hi = 0, last_start = 0, first_end = UINT64_MAX, sum_end = 0;
	unsigned nend = 0;
	for (unsigned i = 0; i < r->ctas && i < t->max_ctas; i++) {
		uint64_t a = s[2 * i], b = s[2 * i + 1];
		if (a && a < lo)
			lo = a;
		if (a > last_start)
			last_start = a;
		if (b > hi)
			hi = b;
		if (b && b < first_end)
			first_end = b;
		if (b && lo != UINT64_MAX) {
			sum_end += b - lo; /* from the first start: no overflow */
			nend++;
		}
	}
	r->gpu_start = lo == UINT64_MAX ? 0 : lo;
	r->gpu_end = hi;
	r->gpu_last_start = last_start;
	/* A mean rather than a median: this runs on the worker (traced runs
	 * only), and a sort of every CTA's end would delay what it reports. */
	r->gpu_first_end = first_end == UINT64_MAX ? 0 : first_end;
	r->gpu_mean_end = nend ? lo + sum_end / nend : 0;
}

void xi_gpu_trace_query(struct xi_gpu_trace *t, uint64_t ns, bool ready)
{
	t->queries++;
	t->query_ns += ns;
	if (ready) {
		t->queries_ready++;
		t->query_ready_ns += ns;
	}
}

/* ------------------------------------------------------------ summary */

/* One stage's p50 / p90 / max in microseconds, over n values. */
static void stage(const char *kind, const char *name, int64_t *v, size_t n)
{
	if (!n)
		return;
	qsort(v, n, sizeof(*v), cmp_i64);
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += (double)v[i];
	xinfo("XFER_GPU_TRACE %-6s %-34s n %6zu  mean %9.2f  p50 %9.2f  p90 %9.2f  max %9.2f us", kind, name, n,
	      sum / (double)n / 1e3, (double)v[n / 2] / 1e3, (double)v[n * 9 / 10] / 1e3, (double)v[n - 1] / 1e3);
}

#define NSTAGES 11
static const char *const stage_name[NSTAGES] = {
	"open->launch (waiting to batch)",
	"launch call (host)",
	"event record (host)",
	"launch returned->GPU start (clocks)",
	"GPU time (first CTA start->last end)",
	"GPU idle since previous kernel end",
	"GPU end->worker saw it (clocks)",
	"launch returned->worker saw it",
	"open->worker saw it",
	"GPU CTA starts (first->last)",
	"GPU CTA ends (mean->last)",
};

static void summarize(struct xi_gpu_trace *t, uint8_t kind)
{
	uint64_t first = t->n > TRACE_RECS ? t->n - TRACE_RECS : 0;
	size_t cap = (size_t)(t->n - first);
	int64_t *v[NSTAGES];
	size_t n[NSTAGES] = {0};
	for (int s = 0; s < NSTAGES; s++)
		v[s] = malloc((cap ? cap : 1) * sizeof(int64_t));
	uint64_t recs = 0, calls = 0, bytes = 0, prev_end = 0;
	for (uint64_t k = first; k < t->n; k++) {
		const struct xi_trace_rec *r = &t->rec[k % TRACE_RECS];
		if (r->kind != kind || !r->done || !v[NSTAGES - 1])
			continue;
		recs++;
		calls += r->calls;
		bytes += r->bytes;
		int64_t x[NSTAGES] = {
			(int64_t)(r->t_launch - r->t_open),
			(int64_t)(r->t_launched - r->t_launch),
			(int64_t)(r->t_recorded - r->t_launched),
			r->gpu_start ? (int64_t)(r->gpu_start - r->rt_launched) : INT64_MIN,
			r->gpu_start ? (int64_t)(r->gpu_end - r->gpu_start) : INT64_MIN,
			r->gpu_start && prev_end ? (int64_t)(r->gpu_start - prev_end) : INT64_MIN,
			r->gpu_end ? (int64_t)(r->rt_done - r->gpu_end) : INT64_MIN,
			(int64_t)(r->t_done - r->t_launched),
			(int64_t)(r->t_done - r->t_open),
			r->gpu_last_start ? (int64_t)(r->gpu_last_start - r->gpu_start) : INT64_MIN,
			r->gpu_mean_end ? (int64_t)(r->gpu_end - r->gpu_mean_end) : INT64_MIN,
		};
		if (r->gpu_end)
			prev_end = r->gpu_end;
		for (int s = 0; s < NSTAGES; s++)
			if (x[s] != INT64_MIN && v[s])
				v[s][n[s]++] = x[s];
	}
	const char *name = kind == XI_TRACE_KERNEL ? "kernel" : "engine";
	if (recs)
		xinfo("XFER_GPU_TRACE %-6s %llu records, %llu calls (%.2f per record), %.1f MiB per record", name,
		      (unsigned long long)recs, (unsigned long long)calls, (double)calls / (double)recs,
		      (double)bytes / (double)recs / 1048576.0);
	for (int s = 0; s < NSTAGES; s++) {
		if (v[s])
			stage(name, stage_name[s], v[s], n[s]);
		free(v[s]);
	}
}

static void write_csv(struct xi_gpu_trace *t)
{
	char path[300];
	snprintf(path, sizeof(path), "%s.%d", t->path, (int)getpid()); /* one file per process */
	FILE *f = fopen(path, "w");
	if (!f) {
		xwarn("XFER_GPU_TRACE: cannot write %s", path);
		return;
	}
	fprintf(f, "kind,calls,items,ctas,bytes,t_open,t_launch,t_launched,t_recorded,t_done,rt_launched,rt_done,"
		   "gpu_start,gpu_end,gpu_last_start,gpu_first_end,gpu_mean_end\n");
	uint64_t first = t->n > TRACE_RECS ? t->n - TRACE_RECS : 0;
	for (uint64_t k = first; k < t->n; k++) {
		const struct xi_trace_rec *r = &t->rec[k % TRACE_RECS];
		fprintf(f, "%s,%u,%u,%u,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n",
			r->kind == XI_TRACE_KERNEL ? "kernel" : "engine", r->calls, r->items, r->ctas,
			(unsigned long long)r->bytes, (unsigned long long)r->t_open, (unsigned long long)r->t_launch,
			(unsigned long long)r->t_launched, (unsigned long long)r->t_recorded,
			(unsigned long long)r->t_done, (unsigned long long)r->rt_launched,
			(unsigned long long)r->rt_done, (unsigned long long)r->gpu_start,
			(unsigned long long)r->gpu_end, (unsigned long long)r->gpu_last_start,
			(unsigned long long)r->gpu_first_end, (unsigned long long)r->gpu_mean_end);
	}
	fclose(f);
	xinfo("XFER_GPU_TRACE: %llu records written to %s", (unsigned long long)(t->n - first), path);
}

void xi_gpu_trace_destroy(struct xi_gpu_trace *t)
{
	if (!t)
		return;
	if (!t->n) {
		/* Nothing copied here (a target's engine): nothing to say. */
		t->c->cuMemFreeHost(t->slots);
			free(t->rec);
		free(t);
		return;
	}
	summarize(t, XI_TRACE_KERNEL);
	summarize(t, XI_TRACE_ENGINE);
	if (t->queries)
		xinfo("XFER_GPU_TRACE cuEventQuery: %llu calls, mean %.2f us; %llu found the copy done, mean %.2f us",
		      (unsigned long long)t->queries, (double)t->query_ns / (double)t->queries / 1e3,
		      (unsigned long long)t->queries_ready,
		      t->queries_ready ? (double)t->query_ready_ns / (double)t->queries_ready / 1e3 : 0.0);
	xinfo("XFER_GPU_TRACE: clock figures compare %%globaltimer with CLOCK_REALTIME; "
	      "the others are one clock each");
	if (t->path[0])
		write_csv(t);
	t->c->cuMemFreeHost(t->slots);
	free(t->rec);
	free(t);
}
