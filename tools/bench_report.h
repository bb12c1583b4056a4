/* Turning measurements into rows: the perftest-style table, JSON lines, the
 * host-proxy overhead table, the PASS/MISS target lines and the plot. */
#ifndef XFER_BENCH_REPORT_H
#define XFER_BENCH_REPORT_H

#include <stdio.h>

#include "bench.h"

struct row {
	uint32_t op, impl;
	uint64_t bytes;
	uint32_t pages, window;
	uint64_t iters;
	double gbps, peak_gbps, mops, p50_us, p99_us; /* NaN: not measured */
	double ratio;                                /* throughput over the raw row's */
	double spread;                               /* (max - min) / median over rounds */
	unsigned rounds;
	bool has_ov, has_post;
	double ov[OV_COUNT][4]; /* p50, p90, p99, p99.9 in us */
	double post[4];         /* raw rows: the provider's write post call, same quantiles */
	int verified;           /* -1 not asked, 0 failed or impossible, 1 every byte */
	uint32_t telemetry;     /* enum bench_telemetry the row ran with */
	char note[80];
};

struct report {
	const struct bench_opts *o;
	FILE *tab; /* the human table: stdout, or stderr under --json */
	struct row *rows;
	size_t n, cap;
	char provider[64], nics[192], completion[160];
	bool busy_poll; /* the engines' completion mode, for the JSON rows */
	int misses;
	uint32_t telemetry; /* enum bench_telemetry of the rows added next */
};

void report_begin(struct report *r, const struct bench_opts *o, const char *provider,
		  const char *nics, const char *completion);
/* Adds a row for a finished measurement and prints it at once. */
struct row *report_add(struct report *r, const struct bench_case *c, uint32_t impl,
		       struct meas *m, double spread, unsigned rounds);
struct row *report_add_ucx(struct report *r, const struct bench_case *c, double gbps, double mops,
			   double p50_us, uint64_t iters, const char *note);
/* Overhead table and target lines. */
void report_end(struct report *r);
/* Says how much of the machine other processes used during the run
 * (fraction, negative: unknown) and warns when it is enough to matter. */
void report_load(struct report *r, double foreign);
/* Writes the rows as JSON lines and runs scripts/plot_bench.py; failures
 * are reported and do not fail the run. */
void report_plot(struct report *r, const char *png);
void report_free(struct report *r);

#endif
