/* Rows, as a table like perftest's (#bytes #iterations BW peak BW average
 * MsgRate) widened with latency and the ratio to the raw loop; as JSON; and
 * the targets the issue sets, judged on this run's own rows. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_report.h"

#define TARGET_SINGLE_MIN_BYTES (64u << 10)
#define TARGET_SINGLE_RATIO 0.95
#define TARGET_PAGED_BYTES 1024u
#define TARGET_PAGED_RATIO 0.90
#define TARGET_CALL_FIRST_US 1.5

static const double quantiles[4] = {0.50, 0.90, 0.99, 0.999};

static void print_header(struct report *r)
{
	fprintf(r->tab, "%-7s %-6s %9s %6s %6s %9s %8s %8s %9s %8s %8s %7s %6s %s\n", "op", "impl",
		"#bytes", "#pages", "window", "#iters", "BW peak", "BW avg", "MsgRate", "p50", "p99",
		"vs raw", "spread", "check");
	fprintf(r->tab, "%-7s %-6s %9s %6s %6s %9s %8s %8s %9s %8s %8s %7s %6s\n", "", "", "", "", "",
		"", "[Gb/s]", "[Gb/s]", "[Mops/s]", "[us]", "[us]", "", "[%]");
}

void report_begin(struct report *r, const struct bench_opts *o, const char *provider,
		  const char *nics, const char *completion)
{
	memset(r, 0, sizeof(*r));
	r->o = o;
	r->tab = o->json ? stderr : stdout;
	snprintf(r->provider, sizeof(r->provider), "%s", provider);
	snprintf(r->nics, sizeof(r->nics), "%s", nics);
	snprintf(r->completion, sizeof(r->completion), "%s", completion ? completion : "-");
	fprintf(r->tab, "xfer-bench: provider %s on %s; ", provider, nics);
	if (o->iters)
		fprintf(r->tab, "%llu timed calls per row", (unsigned long long)o->iters);
	else
		fprintf(r->tab, "%.2g s per row", o->seconds);
	fprintf(r->tab, "; %u rounds; writes complete: %s%s\n", o->rounds, r->completion,
		o->verify ? "; verifying" : "");
	fprintf(r->tab, "single/paged: latency = call to completion under the window; paged MsgRate "
			"counts pages; imm/send: ping-pong, latency = half round trip\n");
	print_header(r);
	fflush(r->tab);
}

static void fmt(char *buf, size_t cap, const char *f, double v)
{
	if (isnan(v))
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, f, v);
}

static void print_row(struct report *r, const struct row *w)
{
	char pages[16] = "-", peak[16], avg[16], rate[16], p50[16], p99[16], ratio[16], spread[16];
	if (w->op == OP_PAGED)
		snprintf(pages, sizeof(pages), "%u", w->pages);
	fmt(peak, sizeof(peak), "%.2f", w->peak_gbps);
	fmt(avg, sizeof(avg), "%.2f", w->gbps);
	fmt(rate, sizeof(rate), "%.4f", w->mops);
	fmt(p50, sizeof(p50), "%.1f", w->p50_us);
	fmt(p99, sizeof(p99), "%.1f", w->p99_us);
	fmt(ratio, sizeof(ratio), "%.3f", w->ratio);
	fmt(spread, sizeof(spread), "%.0f", w->spread * 100);
	const char *check = w->verified < 0 ? "" : w->verified ? "verified" : "NOT VERIFIED";
	fprintf(r->tab, "%-7s %-6s %9llu %6s %6u %9llu %8s %8s %9s %8s %8s %7s %6s %s%s%s\n",
		bench_op_name[w->op], bench_impl_name[w->impl], (unsigned long long)w->bytes, pages,
		w->window, (unsigned long long)w->iters, peak, avg, rate, p50, p99, ratio, spread, check,
		w->note[0] && *check ? " " : "", w->note);
	fflush(r->tab);
}

static void json_num(FILE *f, const char *key, double v)
{
	if (isnan(v) || isinf(v))
		fprintf(f, ",\"%s\":null", key);
	else
		fprintf(f, ",\"%s\":%.6g", key, v);
}

static void json_str(FILE *f, const char *key, const char *s)
{
	fprintf(f, ",\"%s\":\"", key);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc((unsigned char)*s < 0x20 ? '?' : *s, f);
	}
	fputc('"', f);
}

static void print_json(const struct report *r, const struct row *w, FILE *f)
{
	fprintf(f, "{\"op\":\"%s\"", bench_op_name[w->op]);
	json_str(f, "impl", bench_impl_name[w->impl]);
	if (w->impl == IMPL_XFER && w->telemetry != TEL_KEEP)
		json_str(f, "telemetry", w->telemetry == TEL_ON ? "on" : "off");
	json_str(f, "provider", r->provider);
	json_str(f, "nics", r->nics);
	fprintf(f, ",\"bytes\":%llu,\"pages\":%u,\"window\":%u,\"iters\":%llu",
		(unsigned long long)w->bytes, w->op == OP_PAGED ? w->pages : 0, w->window,
		(unsigned long long)w->iters);
	json_num(f, "gbps", w->gbps);
	json_num(f, "peak_gbps", w->peak_gbps);
	json_num(f, "mops", w->mops);
	json_num(f, "p50_us", w->p50_us);
	json_num(f, "p99_us", w->p99_us);
	/* baseline: which baseline this row is; null for xfer itself. */
	if (w->impl == IMPL_XFER)
		fprintf(f, ",\"baseline\":null");
	else
		json_str(f, "baseline", bench_impl_name[w->impl]);
	json_num(f, "ratio", w->ratio);
	fprintf(f, ",\"rounds\":%u", w->rounds);
	fprintf(f, ",\"busy_poll\":%s,\"cpu_pin\":%s", r->busy_poll ? "true" : "false",
		r->o->cpu_pin ? "true" : "false");
	json_num(f, "spread", w->spread);
	fprintf(f, ",\"verified\":%s", w->verified < 0 ? "null" : w->verified ? "true" : "false");
	if (w->has_ov) {
		static const char *keys[OV_COUNT] = {"call_enq", "enq_first", "post_all", "call_first",
						     "enq_deq", "prov_post"};
		fprintf(f, ",\"overhead_us\":{");
		for (int k = 0; k < OV_COUNT; k++) {
			fprintf(f, "%s\"%s\":[", k ? "," : "", keys[k]);
			for (int q = 0; q < 4; q++) {
				if (isnan(w->ov[k][q]))
					fprintf(f, "%snull", q ? "," : "");
				else
					fprintf(f, "%s%.4g", q ? "," : "", w->ov[k][q]);
			}
			fputc(']', f);
		}
		fputc('}', f);
	}
	if (w->has_post)
		fprintf(f, ",\"raw_post_us\":[%.4g,%.4g,%.4g,%.4g]", w->post[0], w->post[1], w->post[2],
			w->post[3]);
	if (w->note[0])
		json_str(f, "note", w->note);
	fprintf(f, "}\n");
	fflush(f);
}

static const struct row *raw_row(const struct report *r, const struct row *w)
{
	for (size_t i = r->n; i-- > 0;) {
		const struct row *x = &r->rows[i];
		if (x->impl == IMPL_RAW && x->op == w->op && x->bytes == w->bytes &&
		    (w->op != OP_PAGED || x->pages == w->pages))
			return x;
	}
	return NULL;
}

static struct row *new_row(struct report *r, const struct bench_case *c, uint32_t impl)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		struct row *rows = realloc(r->rows, cap * sizeof(*rows));
		if (!rows)
			return NULL;
		r->rows = rows;
		r->cap = cap;
	}
	struct row *w = &r->rows[r->n];
	memset(w, 0, sizeof(*w));
	w->op = c->op;
	w->impl = impl;
	w->bytes = c->bytes;
	w->pages = c->pages;
	w->window = c->window;
	w->verified = c->verify ? 0 : -1;
	w->gbps = w->peak_gbps = w->mops = w->p50_us = w->p99_us = w->ratio = w->spread = NAN;
	w->rounds = 1;
	w->telemetry = impl == IMPL_XFER ? r->telemetry : TEL_KEEP;
	return w;
}

static void finish_row(struct report *r, struct row *w)
{
	const struct row *raw = w->impl == IMPL_RAW ? w : raw_row(r, w);
	if (raw && raw->mops > 0)
		w->ratio = w->mops / raw->mops;
	r->n++;
	print_row(r, w);
	if (r->o->json)
		print_json(r, w, stdout);
}

struct row *report_add(struct report *r, const struct bench_case *c, uint32_t impl, struct meas *m,
		       double spread, unsigned rounds)
{
	struct row *w = new_row(r, c, impl);
	if (!w)
		return NULL;
	w->spread = spread;
	w->rounds = rounds;
	w->iters = m->calls;
	if (m->t_ns) {
		w->gbps = (double)m->bytes * 8 / (double)m->t_ns;
		w->mops = (double)m->wrs * 1e3 / (double)m->t_ns;
		w->peak_gbps = m->peak_bps * 8 / 1e9;
	}
	double q[2];
	samples_quantiles(&m->lat, (const double[]){0.50, 0.99}, q, 2);
	w->p50_us = q[0];
	w->p99_us = q[1];
	for (int k = 0; k < OV_COUNT; k++) {
		if (!m->ov[k].n)
			continue;
		w->has_ov = true;
		samples_quantiles(&m->ov[k], quantiles, w->ov[k], 4);
	}
	if (m->raw_post.n) {
		w->has_post = true;
		samples_quantiles(&m->raw_post, quantiles, w->post, 4);
	}
	if (c->verify)
		w->verified = m->verified;
	if (impl == IMPL_XFER && r->o->trace && !w->has_ov)
		snprintf(w->note, sizeof(w->note), "(no trace records)");
	if (impl == IMPL_XFER && r->o->telemetry == TEL_BOTH)
		snprintf(w->note + strlen(w->note), sizeof(w->note) - strlen(w->note), "%stelemetry %s",
			 w->note[0] ? " " : "", w->telemetry == TEL_ON ? "on" : "off");
	finish_row(r, w);
	return w;
}

struct row *report_add_ucx(struct report *r, const struct bench_case *c, double gbps, double mops,
			   double p50_us, uint64_t iters, const char *note)
{
	struct row *w = new_row(r, c, IMPL_UCX);
	if (!w)
		return NULL;
	w->verified = -1; /* ucx_perftest does not check data */
	w->gbps = w->peak_gbps = gbps;
	w->mops = mops;
	w->p50_us = p50_us;
	w->iters = iters;
	bool reused = note && !strcmp(note, "(= single row)");
	if (c->op == OP_PAGED)
		snprintf(w->note, sizeof(w->note), "(ucp_put_bw of one page%s)",
			 reused ? ", from the single row" : "");
	if (note && *note && !reused)
		snprintf(w->note + strlen(w->note), sizeof(w->note) - strlen(w->note), "%s%s",
			 w->note[0] ? " " : "", note);
	finish_row(r, w);
	return w;
}

/* A row's op, bytes and pages: the key of the trace tables' lines. */
static void print_row_key(FILE *f, const struct row *w)
{
	char pages[16] = "-";
	if (w->op == OP_PAGED)
		snprintf(pages, sizeof(pages), "%u", w->pages);
	fprintf(f, "%-7s %9llu %6s", bench_op_name[w->op], (unsigned long long)w->bytes, pages);
}

static void print_overhead(struct report *r)
{
	bool any = false;
	for (size_t i = 0; i < r->n; i++)
		any |= r->rows[i].has_ov;
	if (!any)
		return;
	fprintf(r->tab, "\nhost-proxy overhead of xfer calls, from the engine's trace "
			"(us: p50 / p90 / p99 / p99.9; one call in 17 traced on single writes\n"
			"under 256 KiB and ping-pongs, every call otherwise)\n");
	fprintf(r->tab, "%-7s %9s %6s", "op", "#bytes", "#pages");
	for (int k = 0; k < OV_COUNT; k++)
		fprintf(r->tab, "  %-27s", ov_name[k]);
	fputc('\n', r->tab);
	for (size_t i = 0; i < r->n; i++) {
		const struct row *w = &r->rows[i];
		if (!w->has_ov)
			continue;
		print_row_key(r->tab, w);
		for (int k = 0; k < OV_COUNT; k++) {
			char cell[64];
			snprintf(cell, sizeof(cell), "%.2f / %.2f / %.2f / %.2f", w->ov[k][0], w->ov[k][1],
				 w->ov[k][2], w->ov[k][3]);
			fprintf(r->tab, "  %-27s", cell);
		}
		if (w->telemetry != TEL_KEEP && r->o->telemetry == TEL_BOTH)
			fprintf(r->tab, "  telemetry %s", w->telemetry == TEL_ON ? "on" : "off");
		fputc('\n', r->tab);
	}
}

/* The raw loop's own post calls beside the engine's "provider's first post
 * call": on tcp;ofi_rxm the provider sends inline, so the two tell whether
 * the provider's work per request differs between the loops. */
static void print_raw_posts(struct report *r)
{
	bool any = false;
	for (size_t i = 0; i < r->n; i++)
		any |= r->rows[i].has_post;
	if (!any)
		return;
	fprintf(r->tab, "\nthe raw loop's write post calls (us: p50 / p90 / p99 / p99.9; one post in %d timed,\n"
			"warm-up included)\n", RAW_POST_EVERY);
	for (size_t i = 0; i < r->n; i++) {
		const struct row *w = &r->rows[i];
		if (!w->has_post)
			continue;
		print_row_key(r->tab, w);
		fprintf(r->tab, "  %.2f / %.2f / %.2f / %.2f\n", w->post[0], w->post[1], w->post[2],
			w->post[3]);
	}
}

static void target_line(struct report *r, bool pass, const char *fmt_, ...)
	__attribute__((format(printf, 3, 4)));

static void target_line(struct report *r, bool pass, const char *fmt_, ...)
{
	va_list ap;
	va_start(ap, fmt_);
	fprintf(r->tab, "  %s  ", pass ? "PASS" : "MISS");
	vfprintf(r->tab, fmt_, ap);
	fputc('\n', r->tab);
	va_end(ap);
	if (!pass)
		r->misses++;
}

/* The targets, judged on this run's own rows. Call -> first post is judged
 * where nothing queues ahead of a call (window 1): under a window of N, the
 * N-th call also waits for the N-1 before it to be posted, which is the
 * provider's posting cost, not the proxy's. */
static void print_targets(struct report *r)
{
	fprintf(r->tab, "\ntargets (this run, provider %s):\n", r->provider);
	int judged = 0, queued = 0, unloaded = 0;
	for (size_t i = 0; i < r->n; i++) {
		const struct row *w = &r->rows[i];
		if (w->impl != IMPL_XFER)
			continue;
		if (w->op == OP_SINGLE && w->bytes >= TARGET_SINGLE_MIN_BYTES) {
			judged++;
			if (isnan(w->ratio))
				fprintf(r->tab, "  SKIP  single write %llu B: no raw row to compare with\n",
					(unsigned long long)w->bytes);
			else
				target_line(r, w->ratio >= TARGET_SINGLE_RATIO,
					    "single write %llu B: %.3fx the raw loop's Gbit/s (want >= %.2f)",
					    (unsigned long long)w->bytes, w->ratio, TARGET_SINGLE_RATIO);
		}
		if (w->op == OP_PAGED && w->bytes == TARGET_PAGED_BYTES) {
			judged++;
			if (isnan(w->ratio))
				fprintf(r->tab, "  SKIP  paged 1 KiB x %u: no raw row to compare with\n", w->pages);
			else
				target_line(r, w->ratio >= TARGET_PAGED_RATIO,
					    "paged 1 KiB pages x %u per call: %.3fx the raw loop's ops/s (want >= %.2f)",
					    w->pages, w->ratio, TARGET_PAGED_RATIO);
		}
		if (!w->has_ov)
			continue;
		if (w->window > 1) {
			queued++;
			continue;
		}
		judged++;
		unloaded++;
		target_line(r, w->ov[OV_CALL_FIRST][0] < TARGET_CALL_FIRST_US,
			    "call -> first post p50, %s %llu B, window 1: %.2f us (want < %.1f)",
			    bench_op_name[w->op], (unsigned long long)w->bytes, w->ov[OV_CALL_FIRST][0],
			    TARGET_CALL_FIRST_US);
	}
	if (queued)
		fprintf(r->tab, "  (call -> first post is not judged on the %d rows with a window > 1: it\n"
				"   includes waiting behind earlier calls; see the overhead table)\n", queued);
	if (queued && !unloaded)
		fprintf(r->tab, "  SKIP  call -> first post: no window-1 row in this run (add --op imm)\n");
	if (!judged && !queued)
		fprintf(r->tab, "  (no row in this run is covered by a target)\n");
}

/* --telemetry both: each xfer row with telemetry on against the same row
 * with it off, measured in turns in this run. "noise" is the larger of the
 * two rows' spreads over their rounds: a ratio below 1 - noise is slower
 * beyond it. */
static void print_telemetry(struct report *r)
{
	if (r->o->telemetry != TEL_BOTH)
		return;
	fprintf(r->tab, "\ntelemetry on vs off (this run, same rows in turns; MsgRate on/off, p50 on/off):\n");
	int slower = 0, pairs = 0;
	for (size_t i = 0; i < r->n; i++) {
		const struct row *on = &r->rows[i];
		if (on->impl != IMPL_XFER || on->telemetry != TEL_ON)
			continue;
		const struct row *off = NULL;
		for (size_t j = 0; j < r->n && !off; j++) {
			const struct row *x = &r->rows[j];
			if (x->impl == IMPL_XFER && x->telemetry == TEL_OFF && x->op == on->op &&
			    x->bytes == on->bytes && x->pages == on->pages && x->window == on->window)
				off = x;
		}
		if (!off || !(off->mops > 0) || !(on->mops > 0))
			continue;
		pairs++;
		double ratio = on->mops / off->mops, p50 = on->p50_us / off->p50_us;
		double noise = fmax(isnan(on->spread) ? 0 : on->spread, isnan(off->spread) ? 0 : off->spread);
		/* One round has no spread: no noise to judge against. */
		bool judged = on->rounds > 1 && off->rounds > 1;
		bool beyond = judged && ratio < 1 - noise;
		slower += beyond;
		char pages[16] = "";
		if (on->op == OP_PAGED)
			snprintf(pages, sizeof(pages), " x %u", on->pages);
		fprintf(r->tab, "  %-6s %9llu B%-8s rate %.3f  p50 %.3f  noise %.0f%%  %s\n", bench_op_name[on->op],
			(unsigned long long)on->bytes, pages, ratio, p50, noise * 100,
			!judged ? "not judged (one round: use --rounds 3 or more)"
			: beyond ? "SLOWER beyond noise" : "within noise");
	}
	fprintf(r->tab, "  %d of %d rows slower with telemetry beyond noise\n", slower, pairs);
}

void report_end(struct report *r)
{
	print_overhead(r);
	print_raw_posts(r);
	print_targets(r);
	print_telemetry(r);
	fflush(r->tab);
}

void report_load(struct report *r, double foreign)
{
	if (foreign < 0)
		return;
	fprintf(r->tab, "\nother processes kept %.0f%% of this machine's CPU time busy during the run%s\n",
		foreign * 100,
		foreign > 0.05 ? ": the figures above are disturbed by them (see spread)" : "");
	fflush(r->tab);
}

/* The plot script next to the binary in a build tree, or installed. */
static bool find_script(char *out, size_t cap)
{
	const char *env = getenv("XFER_BENCH_PLOT_SCRIPT");
	if (env && *env) {
		snprintf(out, cap, "%s", env);
		return access(out, R_OK) == 0;
	}
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return false;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return false;
	*slash = 0;
	static const char *rel[] = {"/../../scripts/plot_bench.py", "/../scripts/plot_bench.py",
				    "/../share/xfer/plot_bench.py"};
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(out, cap, "%s%s", exe, rel[i]);
		if (access(out, R_OK) == 0)
			return true;
	}
	return false;
}

void report_plot(struct report *r, const char *png)
{
	char script[PATH_MAX + 64], json[] = "/tmp/xfer-bench-XXXXXX";
	if (!find_script(script, sizeof(script))) {
		fprintf(r->tab, "plot: skipped: plot_bench.py not found (set XFER_BENCH_PLOT_SCRIPT)\n");
		return;
	}
	int fd = mkstemp(json);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		fprintf(r->tab, "plot: skipped: cannot write a temporary file\n");
		return;
	}
	for (size_t i = 0; i < r->n; i++)
		print_json(r, &r->rows[i], f);
	fclose(f);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		/* The table owns stdout under --json; the script's chatter goes
		 * where the table goes. */
		dup2(fileno(r->tab), 1);
		execlp("python3", "python3", script, "--out", png, json, (char *)NULL);
		_exit(127);
	}
	int status = 0;
	if (pid > 0)
		waitpid(pid, &status, 0);
	unlink(json);
	/* Installs nothing: a missing piece is named with its install command. */
	if (pid < 0 || !WIFEXITED(status))
		fprintf(r->tab, "plot: skipped: plot_bench.py did not run to its end\n");
	else if (WEXITSTATUS(status) == 127)
		fprintf(r->tab, "plot: skipped: no python3 (Debian: apt-get install python3 python3-matplotlib)\n");
	else if (WEXITSTATUS(status) == 3)
		fprintf(r->tab, "plot: skipped: no matplotlib (Debian: apt-get install python3-matplotlib)\n");
	else if (WEXITSTATUS(status))
		fprintf(r->tab, "plot: skipped: plot_bench.py exited %d\n", WEXITSTATUS(status));
	else
		fprintf(r->tab, "plot: %s\n", png);
}

void report_free(struct report *r)
{
	free(r->rows);
	r->rows = NULL;
	r->n = r->cap = 0;
}
