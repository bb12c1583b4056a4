/* kv-bench-module: how many completions per second pass through the KV
 * module, against the same writes through the bare engine in the same run.
 *
 * One process holds a decoder and a prefiller (each with its engine, worker
 * and control thread). Each round admits `inflight` requests of `tokens`
 * tokens; the prefiller binds them and declares every layer done at once,
 * then finishes them; the decoder takes the events and releases them. Every
 * layer is one paged write per plan segment and the context one more write,
 * so a request is layers * segments + 1 completions in the prefiller (and one
 * immediate-counter completion in the decoder). Pages are small, so the
 * figure is what the module costs per completion, not bandwidth.
 *
 * The baseline submits exactly those writes (same plan, same pages, same
 * immediates) between two bare engines, the receiver arming one immediate
 * counter per request, completions reaped from the completion queues. The
 * ratio module/engine is the number to compare between builds: it factors
 * out the machine and its load.
 *
 *   kv-bench-module [--layers N] [--tokens N] [--inflight N] [--rounds N] [--module-only|--engine-only]
 * Provider: $XFER_TEST_PROVIDER (default tcp on loopback; shm on one host). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kv_test.h"

struct opts {
	uint32_t layers, tokens, inflight, rounds;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU time of the whole process (every thread), ns. */
static uint64_t cpu_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

/* What one run measured over its timed rounds. */
struct result {
	uint64_t completions;
	double wall_s, cpu_s;
};

static struct xfer_kv_layout bench_layout(const struct opts *o, uint32_t pages)
{
	return (struct xfer_kv_layout){.kind = XFER_KV_GQA, .layers = o->layers, .pages = pages,
				       .page_tokens = 1, .kv_heads = 1, .head_dim = 8, .dtype_bytes = 2,
				       .tp_size = 1, .tp_rank = 0};
}

static void attr(struct xfer_attr *a)
{
	kvt_attr(a, 0);
	a->timeout_ms = 30000;
}

/* ------------------------------------------------------------ the module */

static void serve_new(xfer_kv_prefiller_t *p, const struct opts *o, uint32_t *left)
{
	struct xfer_kv_pf_event ev[16];
	int n = xfer_kv_pf_poll(p, ev, 16, 100);
	CHECK(n >= 0);
	for (int i = 0; i < n; i++) {
		CHECK(ev[i].type == XFER_KV_PF_NEW || ev[i].type == XFER_KV_PF_DONE);
		if (ev[i].type != XFER_KV_PF_NEW)
			continue;
		CHECK(ev[i].status == 0);
		uint32_t pages[4096];
		CHECK(ev[i].npages <= 4096);
		/* The request's k-th page is source page (slot * tokens + k). */
		for (uint32_t k = 0; k < ev[i].npages; k++)
			pages[k] = (uint32_t)(ev[i].id % o->inflight) * o->tokens + k;
		CHECK_OK(xfer_kv_pf_bind(p, ev[i].id, pages, ev[i].npages));
		CHECK_OK(xfer_kv_pf_layers_done(p, ev[i].id, o->layers));
		CHECK_OK(xfer_kv_pf_finish(p, ev[i].id, "ctx", 3));
		(*left)--;
	}
}

static struct result run_module(const struct opts *o)
{
	uint32_t pages = o->tokens * o->inflight;
	struct xfer_kv_layout l = bench_layout(o, pages);
	struct xfer_attr a;
	attr(&a);
	struct xfer_kv_pf_config pc;
	xfer_kv_pf_config_init(&pc);
	pc.layout = l;
	pc.kv = kvt_pool(&l, 1);
	pc.ctx_bytes = 64;
	pc.max_jobs = o->inflight;
	xfer_kv_prefiller_t *p = NULL;
	int rc = xfer_kv_prefiller_create(&pc, &a, &p);
	if (rc == -XFER_ENOPROV || rc == -ENODEV) {
		fprintf(stderr, "SKIP: provider %s not available\n", a.provider);
		exit(T_SKIP);
	}
	CHECK_OK(rc);
	struct xfer_kv_dec_config dc;
	xfer_kv_dec_config_init(&dc);
	dc.layout = l;
	dc.kv = kvt_pool(&l, 0);
	dc.ctx_bytes = 64;
	dc.max_requests = o->inflight;
	xfer_kv_decoder_t *d = NULL;
	CHECK_OK(xfer_kv_decoder_create(&dc, &a, &d));

	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(xfer_kv_prefiller_engine(p), addr, sizeof(addr), NULL);
	CHECK(alen > 0);
	struct xfer_kv_rank rank = {.addr = addr, .addr_len = (size_t)alen, .layout = l};
	uint32_t g;
	CHECK_OK(xfer_kv_dec_join(d, &rank, 1, &g));

	uint64_t id = 0, t0 = 0, c0 = 0;
	for (uint32_t round = 0; round <= o->rounds; round++) {
		if (round == 1) {
			t0 = now_ns(); /* round 0 warms up connections and caches */
			c0 = cpu_ns();
		}
		for (uint32_t i = 0; i < o->inflight; i++) {
			struct xfer_kv_request r = {.id = ++id, .group = g, .tokens = o->tokens,
						    .timeout_ms = 30000};
			CHECK_OK(xfer_kv_dec_admit(d, &r));
		}
		/* The application's part is sequential, so that its polling does
		 * not compete with the module's threads for the cores. */
		uint32_t to_serve = o->inflight, to_end = o->inflight;
		uint64_t give_up = now_ns() + 60000000000ull;
		while (to_serve) {
			CHECK(now_ns() < give_up);
			serve_new(p, o, &to_serve);
		}
		while (to_end) {
			CHECK(now_ns() < give_up);
			struct xfer_kv_dec_event ev[16];
			int n = xfer_kv_dec_poll(d, ev, 16, 100);
			CHECK(n >= 0);
			for (int i = 0; i < n; i++) {
				CHECK_RC(ev[i].status, 0);
				CHECK_OK(xfer_kv_dec_release(d, ev[i].id));
				to_end--;
			}
		}
	}
	struct result res = {.wall_s = (double)(now_ns() - t0) / 1e9, .cpu_s = (double)(cpu_ns() - c0) / 1e9};
	struct xfer_kv_pf_stats st;
	xfer_kv_pf_stats(p, &st);
	CHECK(st.msgs_dropped == 0);
	struct xfer_kv_plan *pl = malloc(sizeof(*pl));
	CHECK(pl);
	CHECK_OK(xfer_kv_plan(&l, &l, pl));
	res.completions = (uint64_t)o->rounds * o->inflight * ((uint64_t)o->layers * pl->nsegs + 1);
	free(pl);
	xfer_kv_decoder_destroy(d);
	xfer_kv_prefiller_destroy(p);
	free(pc.kv);
	free(dc.kv);
	return res;
}

/* ----------------------------------------------------- the bare engines */

static int reap(xfer_engine_t *e, int want_kind)
{
	struct xfer_cqe c[64];
	int n = xfer_cq_wait(e, c, 64, 1);
	if (n == -ETIMEDOUT)
		return 0;
	CHECK(n >= 0);
	for (int i = 0; i < n; i++) {
		CHECK_RC(c[i].res, 0);
		CHECK(want_kind == 0 || (int)c[i].kind == want_kind);
	}
	return n;
}

typedef int (*submit_fn)(xfer_engine_t *e, const void *w, const struct xfer_completion *c);

static void submit(xfer_engine_t *e, submit_fn fn, const void *w, uint64_t *outstanding)
{
	struct xfer_completion c = {.user_data = 1};
	int rc;
	while ((rc = fn(e, w, &c)) == -EAGAIN)
		*outstanding -= (uint64_t)reap(e, 0);
	CHECK_OK(rc);
	(*outstanding)++;
}

static int paged(xfer_engine_t *e, const void *w, const struct xfer_completion *c)
{
	return xfer_write_paged(e, w, c);
}

static int plain(xfer_engine_t *e, const void *w, const struct xfer_completion *c)
{
	return xfer_write(e, w, c);
}

static struct result run_engines(const struct opts *o)
{
	uint32_t pages = o->tokens * o->inflight;
	struct xfer_kv_layout l = bench_layout(o, pages);
	struct xfer_attr a;
	attr(&a);
	xfer_engine_t *src = t_engine(&a), *dst = t_engine(&a);
	uint8_t addr[XFER_ADDR_MAX];
	xfer_peer_t to_dst, to_src;
	int alen = xfer_engine_addr(dst, addr, sizeof(addr), NULL);
	CHECK(alen > 0);
	CHECK_OK(xfer_peer_add(src, addr, (size_t)alen, &to_dst));
	alen = xfer_engine_addr(src, addr, sizeof(addr), NULL);
	CHECK(alen > 0);
	CHECK_OK(xfer_peer_add(dst, addr, (size_t)alen, &to_src));
	size_t bytes = xfer_kv_layout_bytes(&l);
	void *sk = kvt_pool(&l, 1), *dk = kvt_pool(&l, 0), *sctx = calloc(1, 64 * o->inflight),
	     *dctx = calloc(1, 64 * o->inflight);
	CHECK(sctx && dctx);
	xfer_mr_t *smr, *dmr, *scmr, *dcmr;
	CHECK_OK(xfer_mr_reg(src, sk, bytes, &smr));
	CHECK_OK(xfer_mr_reg(dst, dk, bytes, &dmr));
	CHECK_OK(xfer_mr_reg(src, sctx, 64 * o->inflight, &scmr));
	CHECK_OK(xfer_mr_reg(dst, dctx, 64 * o->inflight, &dcmr));
	uint8_t desc[XFER_DESC_MAX];
	xfer_rmr_t *rkv, *rctx;
	int dl = xfer_mr_desc(dmr, desc, sizeof(desc), NULL);
	CHECK(dl > 0);
	CHECK_OK(xfer_rmr_import(src, to_dst, desc, (size_t)dl, &rkv));
	dl = xfer_mr_desc(dcmr, desc, sizeof(desc), NULL);
	CHECK(dl > 0);
	CHECK_OK(xfer_rmr_import(src, to_dst, desc, (size_t)dl, &rctx));
	struct xfer_kv_plan *pl = malloc(sizeof(*pl));
	CHECK(pl);
	CHECK_OK(xfer_kv_plan(&l, &l, pl));
	uint32_t *idx = malloc(sizeof(uint32_t) * pages);
	CHECK(idx);
	for (uint32_t i = 0; i < pages; i++)
		idx[i] = i;

	uint64_t t0 = 0, c0 = 0, per_req = (uint64_t)o->layers * pl->nsegs + 1;
	for (uint32_t round = 0; round <= o->rounds; round++) {
		if (round == 1) {
			t0 = now_ns();
			c0 = cpu_ns();
		}
		uint64_t out = 0;
		for (uint32_t q = 0; q < o->inflight; q++) {
			struct xfer_completion c = {.user_data = q};
			CHECK_OK(xfer_expect_imm(dst, 0x1000 + q, (uint32_t)per_req, &c));
		}
		for (uint32_t q = 0; q < o->inflight; q++) {
			const uint32_t *pg = idx + q * o->tokens;
			for (uint32_t layer = 0; layer < o->layers; layer++)
				for (uint32_t s = 0; s < pl->nsegs; s++) {
					struct xfer_paged_write w = {
						.src = smr, .dst = rkv, .page_len = pl->segs[s].len,
						.src_pages = pg, .src_stride = pl->src_page_stride,
						.src_base = layer * pl->src_layer_stride + pl->segs[s].src_off,
						.dst_pages = pg, .dst_stride = pl->dst_page_stride,
						.dst_base = layer * pl->dst_layer_stride + pl->segs[s].dst_off,
						.npages = o->tokens, .imm = 0x1000 + q, .flags = XFER_F_IMM};
					submit(src, paged, &w, &out);
				}
			struct xfer_write w = {.src = scmr, .src_off = 64 * q, .dst = rctx, .dst_off = 64 * q,
					       .len = 3, .imm = 0x1000 + q, .flags = XFER_F_IMM};
			submit(src, plain, &w, &out);
		}
		uint32_t expects = o->inflight;
		uint64_t give_up = now_ns() + 60000000000ull;
		while (out || expects) {
			CHECK(now_ns() < give_up);
			if (out)
				out -= (uint64_t)reap(src, 0);
			if (expects)
				expects -= (uint32_t)reap(dst, XFER_OP_EXPECT);
		}
	}
	struct result res = {.completions = (uint64_t)o->rounds * o->inflight * per_req,
			     .wall_s = (double)(now_ns() - t0) / 1e9, .cpu_s = (double)(cpu_ns() - c0) / 1e9};
	xfer_rmr_free(rkv);
	xfer_rmr_free(rctx);
	xfer_engine_destroy(src);
	xfer_engine_destroy(dst);
	free(pl);
	free(idx);
	free(sk);
	free(dk);
	free(sctx);
	free(dctx);
	return res;
}

static uint32_t arg_u32(int argc, char **argv, const char *name, uint32_t def)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return (uint32_t)strtoul(argv[i + 1], NULL, 10);
	return def;
}

static void report(const char *name, const struct result *r)
{
	printf("%-13s %10.0f completions/s, %6.3f us CPU each (%llu in %.3f s, %.3f s CPU)\n", name,
	       (double)r->completions / r->wall_s, r->cpu_s * 1e6 / (double)r->completions,
	       (unsigned long long)r->completions, r->wall_s, r->cpu_s);
}

int main(int argc, char **argv)
{
	struct opts o = {.layers = arg_u32(argc, argv, "--layers", 64),
			 .tokens = arg_u32(argc, argv, "--tokens", 4),
			 .inflight = arg_u32(argc, argv, "--inflight", 16),
			 .rounds = arg_u32(argc, argv, "--rounds", 40)};
	CHECK(o.layers && o.tokens && o.tokens <= 4096 && o.inflight && o.rounds);
	/* Engine, module, engine: the better engine run is the baseline (the
	 * machine's load drifts; the better figure is the less disturbed one). */
	const char *only = argc > 1 ? argv[argc - 1] : ""; /* for a profiler */
	if (!strcmp(only, "--module-only") || !strcmp(only, "--engine-only")) {
		struct result r = only[2] == 'm' ? run_module(&o) : run_engines(&o);
		report(only[2] == 'm' ? "KV module:" : "engine alone:", &r);
		return 0;
	}
	struct result e1 = run_engines(&o), m = run_module(&o), e2 = run_engines(&o);
	struct result e = e1.wall_s < e2.wall_s ? e1 : e2;
	printf("# provider %s, %u layers, %u tokens, %u requests in flight, %u rounds\n", t_provider(),
	       o.layers, o.tokens, o.inflight, o.rounds);
	report("engine alone:", &e);
	report("KV module:", &m);
	printf("module/engine: %.3f completions/s, %.3f CPU per completion\n",
	       ((double)m.completions / m.wall_s) / ((double)e.completions / e.wall_s),
	       (m.cpu_s / (double)m.completions) / (e.cpu_s / (double)e.completions));
	return 0;
}
