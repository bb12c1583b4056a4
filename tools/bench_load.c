/* Foreign CPU use during a run: everything /proc/stat saw busy, minus what
 * the two benchmark processes (and the ucx_perftest runs they reaped) used. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_load.h"

static double tv_s(struct timeval t)
{
	return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

/* utime + stime + cutime + cstime of pid, in seconds; 0 when unreadable. */
static double proc_cpu_s(pid_t pid, double hz)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* Fields after the command, which may hold spaces: skip to its ')'. */
	char *p = strrchr(buf, ')');
	unsigned long long ut, st;
	long long cut, cst;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld",
			 &ut, &st, &cut, &cst) != 4)
		return 0;
	return (double)(ut + st + (unsigned long long)cut + (unsigned long long)cst) / hz;
}

void load_mark(struct load_mark *m, pid_t child)
{
	double hz = (double)sysconf(_SC_CLK_TCK);
	unsigned long long v[8] = {0};
	memset(m, 0, sizeof(*m));
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return;
	int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
			 &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (got != 8 || hz <= 0)
		return;
	/* user nice system idle iowait irq softirq steal */
	double busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
	m->busy_s = busy / hz;
	m->total_s = (busy + (double)(v[3] + v[4])) / hz;
	struct rusage self, kids;
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &kids);
	m->own_s = tv_s(self.ru_utime) + tv_s(self.ru_stime) + tv_s(kids.ru_utime) + tv_s(kids.ru_stime);
	if (child > 0)
		m->own_s += proc_cpu_s(child, hz);
	m->ok = true;
}

double load_foreign(const struct load_mark *a, const struct load_mark *b)
{
	double total = b->total_s - a->total_s;
	if (!a->ok || !b->ok || total <= 0)
		return -1;
	double foreign = (b->busy_s - a->busy_s) - (b->own_s - a->own_s);
	/* Tick rounding can make a quiet machine look a hair negative. */
	return foreign < 0 ? 0 : foreign / total;
}
