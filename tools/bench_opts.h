/* xfer-bench's command line. */
#ifndef XFER_BENCH_OPTS_H
#define XFER_BENCH_OPTS_H

#include "bench.h"

/* 0 to run, 1 when help was printed, -1 on a usage error (already reported). */
int opts_parse(int argc, char **argv, struct bench_opts *o);
void opts_usage(FILE *f);
/* The provider and NIC list the engine is asked for, after defaults. */
const char *opts_provider(const struct bench_opts *o);
const char *opts_nics(const struct bench_opts *o);

#endif
