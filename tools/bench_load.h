/* How busy the machine was with other work while we measured: on a small
 * shared machine that, not xfer, can decide a figure. */
#ifndef XFER_BENCH_LOAD_H
#define XFER_BENCH_LOAD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct load_mark {
	bool ok;
	double busy_s, total_s; /* all CPUs, from /proc/stat */
	double own_s;           /* this process, its reaped children, and `child` */
};

/* child: the forked target (its CPU time is ours), or 0. */
void load_mark(struct load_mark *m, pid_t child);
/* Share of the machine's CPU time that other processes used between a and
 * b, 0..1; negative when unknown. */
double load_foreign(const struct load_mark *a, const struct load_mark *b);

#endif
