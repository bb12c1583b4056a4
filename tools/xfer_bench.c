/* xfer-bench: the project's performance benchmark. The initiator runs the
 * matrix (single WRITEs, paged WRITEs, immediate and SEND ping-pongs) for
 * xfer and, in the same run and on the same provider, for a raw libfabric
 * loop, ucx_perftest and memcpy, and prints one row per measurement.
 *
 *   xfer-bench [--provider tcp|shm|auto] [--op single,paged,imm,send] ...
 *   xfer-bench --listen [ADDR:]PORT        (target, e.g. in another netns)
 *   xfer-bench --connect ADDR:PORT ...     (initiator)
 *
 * Without --listen/--connect it forks the target and talks to it over a
 * socketpair. Exit status: 0 when every row ran (and verified, with
 * --verify), 1 when one failed, 2 on a usage error, 77 when the provider
 * is not available here. Missed performance targets never fail the run. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_impl.h"
#include "bench_load.h"
#include "bench_opts.h"
#include "bench_report.h"
#include "bench_target.h"
#include "xfer.h"

#define EXIT_SKIP 77

struct session {
	const struct bench_opts *o;
	struct ctl *ctl;
	const char *host; /* where the target runs, for ucx_perftest's client */
	struct xside *x;
	struct rside *r;
	struct report rep;
	uint32_t next_imm;
	bool shm;
};

static uint32_t default_window(const struct bench_opts *o, uint32_t op)
{
	if (o->window)
		return o->window;
	/* Single: the window of the raw figures in the libfabric notes. Paged:
	 * one call already fills the send queue; a second keeps it full while
	 * the first completes. Ping-pongs: one. */
	return op == OP_SINGLE ? 64 : op == OP_PAGED ? 2 : 1;
}

/* One round of one implementation. */
static int measure(struct session *s, struct bench_case c, uint32_t impl, struct meas *m)
{
	struct limits lim;
	int ret;
	c.impl = impl;
	c.imm = s->next_imm;
	s->next_imm += 4;
	/* A new pattern per round: bytes left by an earlier one cannot pass. */
	c.seed = 0x9e3779b97f4a7c15ull * c.imm + impl;
	limits_for(s->o, &c, &lim);
	if (impl == IMPL_MEMCPY && lim.iters) {
		/* A copy is too quick for a count meant for the network: time it. */
		lim = (struct limits){.ns = 300000000ull, .warm_ns = 30000000ull};
	}
	if (impl == IMPL_XFER)
		ret = xfer_init_case(s->x, s->ctl, &c, &lim, s->o->trace, m);
	else if (impl == IMPL_RAW) {
		struct pin_state pin = {0};
		if (!s->o->raw_unpinned)
			raw_pin(&pin, PIN_INITIATOR);
		ret = raw_init_case(s->r, s->ctl, &c, &lim, s->o->trace, m);
		raw_unpin(&pin);
	}
	else
		ret = memcpy_run(&c, &lim, m);
	if (ret)
		fprintf(stderr, "xfer-bench: %s %s %llu B%s: %s\n", bench_impl_name[impl],
			bench_op_name[c.op], (unsigned long long)c.bytes, c.op == OP_PAGED ? " pages" : "",
			bench_strerror(ret));
	else if (s->o->verbose) {
		fprintf(stderr, "  round: %-6s %-6s %9llu B: %10llu calls in %8.3f ms, %9.4f Mops/s",
			bench_impl_name[impl], bench_op_name[c.op], (unsigned long long)c.bytes,
			(unsigned long long)m->calls, (double)m->t_ns / 1e6,
			m->t_ns ? (double)m->wrs * 1e3 / (double)m->t_ns : 0.0);
		/* Worker sleeps say whether the engine dozed while work was due. */
		if (impl == IMPL_XFER)
			fprintf(stderr, ", worker sleeps: initiator %llu, target %llu",
				(unsigned long long)m->sleeps[0], (unsigned long long)m->sleeps[1]);
		fputc('\n', stderr);
	}
	return ret;
}

static double rate_of(const struct meas *m)
{
	return m->t_ns ? (double)m->wrs / (double)m->t_ns : 0;
}

/* Reports the median round of n, with the rounds' spread around it. */
static void report_rounds(struct session *s, const struct bench_case *c, uint32_t impl,
			  struct meas *ms, unsigned n)
{
	unsigned order[99] = {0};
	for (unsigned i = 0; i < n; i++)
		order[i] = i;
	for (unsigned i = 1; i < n; i++)
		for (unsigned j = i; j > 0 && rate_of(&ms[order[j]]) < rate_of(&ms[order[j - 1]]); j--) {
			unsigned t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	struct meas *med = &ms[order[n / 2]];
	double spread = NAN;
	if (n > 1 && rate_of(med) > 0)
		spread = (rate_of(&ms[order[n - 1]]) - rate_of(&ms[order[0]])) / rate_of(med);
	for (unsigned i = 0; i < n; i++)
		med->verified = med->verified && ms[i].verified;
	report_add(&s->rep, c, impl, med, spread, n);
}

static int run_ucx(struct session *s, const struct bench_case *c)
{
	struct ucx_result u;
	struct bench_case uc = *c;
	uc.impl = IMPL_UCX;
	/* A paged row's UCX figure is ucp_put_bw of one page: the single row
	 * of that size already measured it. */
	for (size_t i = 0; c->op == OP_PAGED && i < s->rep.n; i++) {
		const struct row *w = &s->rep.rows[i];
		if (w->impl == IMPL_UCX && w->op == OP_SINGLE && w->bytes == c->bytes) {
			report_add_ucx(&s->rep, &uc, w->gbps, w->mops, w->p50_us, w->iters,
				       "(= single row)");
			return 0;
		}
	}
	int ret = ucx_run(s->ctl, s->host, xside_provider(s->x), xside_nic(s->x, 0), &uc,
			  s->o->iters ? 0.5 : s->o->seconds, &u);
	report_add_ucx(&s->rep, &uc, u.gbps, u.mops, u.p50_us, u.iters, u.note);
	/* UCX's own failures are reported in its row and do not fail the run;
	 * a broken control socket does. */
	return ret == -EPIPE || ret == -EPROTO || ret == -ETIMEDOUT ? ret : 0;
}

/* One parameter set. Raw and xfer take turns, round after round, so that
 * whatever else the machine does touches both alike; raw is reported first
 * so that xfer's row can show its ratio. */
static int run_point(struct session *s, const struct bench_case *c)
{
	const struct bench_opts *o = s->o;
	unsigned n = o->rounds;
	bool both = o->telemetry == TEL_BOTH;
	struct meas raw[99], xf[99], xoff[99];
	int ret = 0;
	memset(raw, 0, n * sizeof(raw[0]));
	memset(xf, 0, n * sizeof(xf[0]));
	memset(xoff, 0, n * sizeof(xoff[0]));
	struct bench_case on = *c, off = *c;
	on.telemetry = both ? TEL_ON : o->telemetry;
	off.telemetry = TEL_OFF;
	for (unsigned i = 0; i < n && !ret; i++) {
		if (s->r)
			ret = measure(s, *c, IMPL_RAW, &raw[i]);
		/* Telemetry on and off swap places every round: neither always
		 * runs first after the raw loop. */
		if (!ret && both && (i & 1))
			ret = measure(s, off, IMPL_XFER, &xoff[i]);
		if (!ret)
			ret = measure(s, on, IMPL_XFER, &xf[i]);
		if (!ret && both && !(i & 1))
			ret = measure(s, off, IMPL_XFER, &xoff[i]);
	}
	if (!ret) {
		if (s->r)
			report_rounds(s, c, IMPL_RAW, raw, n);
		s->rep.telemetry = on.telemetry;
		report_rounds(s, c, IMPL_XFER, xf, n);
		if (both) {
			s->rep.telemetry = TEL_OFF;
			report_rounds(s, c, IMPL_XFER, xoff, n);
		}
		s->rep.telemetry = TEL_KEEP;
	}
	for (unsigned i = 0; i < n; i++) {
		meas_free(&raw[i]);
		meas_free(&xf[i]);
		meas_free(&xoff[i]);
	}
	if (!ret && (o->baselines & (1u << IMPL_UCX)))
		ret = run_ucx(s, c);
	if (!ret && (o->baselines & (1u << IMPL_MEMCPY)) && s->shm && c->op == OP_SINGLE) {
		struct meas m = {0};
		if (!(ret = measure(s, *c, IMPL_MEMCPY, &m)))
			report_add(&s->rep, c, IMPL_MEMCPY, &m, NAN, 1);
		meas_free(&m);
	}
	return ret;
}

static int run_matrix(struct session *s)
{
	const struct bench_opts *o = s->o;
	int ret = 0;
	for (uint32_t op = 0; op < OP_COUNT && !ret; op++) {
		if (!(o->ops & (1u << op)))
			continue;
		struct bench_case c = {.op = op, .window = default_window(o, op), .verify = o->verify};
		if (op == OP_SINGLE) {
			for (unsigned i = 0; i < o->sizes.n && !ret; i++) {
				c.bytes = o->sizes.v[i];
				ret = run_point(s, &c);
			}
		} else if (op == OP_PAGED) {
			for (unsigned p = 0; p < o->pages.n && !ret; p++) {
				for (unsigned i = 0; i < o->page_sizes.n && !ret; i++) {
					c.bytes = o->page_sizes.v[i];
					c.pages = (uint32_t)o->pages.v[p];
					ret = run_point(s, &c);
				}
			}
		} else if (op == OP_IMM) {
			c.bytes = 0;
			ret = run_point(s, &c);
		} else {
			for (unsigned i = 0; i < o->send_sizes.n && !ret; i++) {
				c.bytes = o->send_sizes.v[i];
				ret = run_point(s, &c);
			}
		}
	}
	return ret;
}

static int open_session(struct session *s)
{
	const struct bench_opts *o = s->o;
	const char *provider = opts_provider(o), *nics = opts_nics(o);
	struct ctl_hello h = {.magic = CTL_MAGIC, .version = CTL_VERSION,
			      .impls = (1u << IMPL_XFER) | o->baselines,
			      .raw_transmit = o->raw_transmit, .raw_pin = !o->raw_unpinned,
			      .cpu_pin = o->cpu_pin, .busy_poll = o->busy_poll_set ? (int)o->busy_poll : -1};
	snprintf(h.provider, sizeof(h.provider), "%s", provider);
	snprintf(h.nics, sizeof(h.nics), "%s", nics ? nics : "");
	int ret = ctl_send(s->ctl, MSG_HELLO, &h, sizeof(h));
	if (ret)
		return ret;
	int worker_cpu = o->cpu_pin ? bench_layout(PIN_INITIATOR, true) : -1;
	int lret = xside_open(&s->x, provider, nics, worker_cpu, o->busy_poll_set ? (int)o->busy_poll : -1);
	struct ctl_hello th;
	ret = ctl_expect(s->ctl, MSG_HELLO, &th, sizeof(th), NULL, 60000);
	if (lret) {
		fprintf(stderr, "xfer-bench: provider %s%s%s: %s\n", provider, nics ? " on " : "",
			nics ? nics : "", xfer_strerror(lret));
		return lret;
	}
	if (ret || th.status) {
		fprintf(stderr, "xfer-bench: the target cannot serve: %s\n",
			xfer_strerror(ret ? ret : th.status));
		return ret ? ret : th.status;
	}
	if ((ret = xside_connect(s->x, s->ctl)))
		return ret;
	s->shm = strstr(xside_provider(s->x), "shm") != NULL;
	if (o->baselines & (1u << IMPL_RAW)) {
		const char *names[4], *prov = xside_provider(s->x);
		unsigned n = xside_nic_count(s->x);
		for (unsigned i = 0; i < n && i < 4; i++)
			names[i] = xside_nic(s->x, i);
		/* The raw loop is libfabric's: against xfer's own shm it runs on
		 * libfabric's shm (its first NIC), against "ofi-NAME" on NAME. */
		if (!strcmp(prov, "shm")) {
			names[0] = NULL;
			n = 1;
		} else if (!strncmp(prov, "ofi-", 4)) {
			prov += 4;
		}
		if (rside_open(&s->r, prov, names, n < 4 ? n : 4,
			       !o->raw_transmit && xside_delivery_complete(s->x)))
			s->r = NULL;
		if (raw_handshake(s->r, s->ctl))
			s->r = raw_drop(s->r);
	}
	if ((o->baselines & (1u << IMPL_UCX)) && !ucx_available())
		fprintf(stderr, "xfer-bench: ucx_perftest is not installed (Debian: apt-get install "
				"ucx-utils); UCX rows will say so\n");
	return 0;
}

static int initiator(const struct bench_opts *o, struct ctl *ctl, const char *host, pid_t child)
{
	struct session s = {.o = o, .ctl = ctl, .host = host, .next_imm = 16};
	struct load_mark l0, l1;
	int ret = open_session(&s);
	if (ret) {
		xside_disconnect(s.x);
		ctl_send(ctl, MSG_BYE, NULL, 0);
		rside_close(s.r);
		xside_close(s.x);
		return ret == -XFER_ENOPROV || ret == -ENODEV ? EXIT_SKIP : 1;
	}
	char nics[192] = "";
	for (unsigned i = 0; i < xside_nic_count(s.x); i++)
		snprintf(nics + strlen(nics), sizeof(nics) - strlen(nics), "%s%s", i ? "," : "",
			 xside_nic(s.x, i));
	char completion[160];
	snprintf(completion, sizeof(completion), "xfer %s, raw %s; xfer waits: %s; threads %s",
		 xside_delivery_complete(s.x) ? "delivery-complete" : "provider default",
		 s.r ? rside_completion(s.r) : "-",
		 xside_busy_poll(s.x) == 2 ? "busy-poll, the waiting thread drives"
		 : xside_busy_poll(s.x) ? "busy-poll" : "spin, then sleep (default)",
		 o->cpu_pin ? "laid out by --cpu-pin" : "unpinned (raw loop pinned)");
	report_begin(&s.rep, o, xside_provider(s.x), nics, completion);
	s.rep.busy_poll = xside_busy_poll(s.x);
	load_mark(&l0, child);
	ret = run_matrix(&s);
	load_mark(&l1, child);
	xside_disconnect(s.x);
	ctl_send(ctl, MSG_BYE, NULL, 0);
	report_end(&s.rep);
	/* A remote target's CPU time is not ours to subtract. */
	if (child > 0)
		report_load(&s.rep, load_foreign(&l0, &l1));
	if (o->plot)
		report_plot(&s.rep, o->plot);
	report_free(&s.rep);
	rside_close(s.r);
	xside_close(s.x);
	return ret ? 1 : 0;
}

/* The host part of "ADDR:PORT", for ucx_perftest's client. */
static void host_of(const char *spec, char *out, size_t cap)
{
	const char *colon = strrchr(spec, ':');
	size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
	if (n >= 2 && spec[0] == '[' && spec[n - 1] == ']') {
		spec++;
		n -= 2;
	}
	snprintf(out, cap, "%.*s", (int)n, spec);
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	int ret = opts_parse(argc, argv, &o);
	if (ret)
		return ret > 0 ? 0 : 2;
	signal(SIGPIPE, SIG_IGN);
	struct ctl ctl = {.fd = -1};
	if (o.listen) {
		if ((ret = ctl_listen(o.listen, &ctl))) {
			fprintf(stderr, "xfer-bench: listen %s: %s\n", o.listen, strerror(-ret));
			return 1;
		}
		ret = target_main(&o, &ctl);
		ctl_close(&ctl);
		return ret;
	}
	if (o.connect) {
		char host[256];
		if ((ret = ctl_connect(o.connect, &ctl))) {
			fprintf(stderr, "xfer-bench: connect %s: %s\n", o.connect, strerror(-ret));
			return 1;
		}
		host_of(o.connect, host, sizeof(host));
		ret = initiator(&o, &ctl, host, 0);
		ctl_close(&ctl);
		return ret;
	}
	struct ctl child_ctl;
	if ((ret = ctl_pair(&ctl, &child_ctl))) {
		fprintf(stderr, "xfer-bench: socketpair: %s\n", strerror(-ret));
		return 1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("xfer-bench: fork");
		return 1;
	}
	if (pid == 0) {
		ctl_close(&ctl);
		ret = target_main(&o, &child_ctl);
		ctl_close(&child_ctl);
		fflush(NULL);
		_exit(ret);
	}
	ctl_close(&child_ctl);
	ret = initiator(&o, &ctl, "127.0.0.1", pid);
	ctl_close(&ctl);
	int status = 0;
	waitpid(pid, &status, 0);
	if (ret == 0 && (!WIFEXITED(status) || WEXITSTATUS(status))) {
		fprintf(stderr, "xfer-bench: the target process failed\n");
		ret = 1;
	}
	return ret;
}
