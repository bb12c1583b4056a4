/* pd-bench: per-layer compute against per-layer KV transfer, and what
 * disaggregation adds to the time to first token, in the shape of the
 * fabric-lib paper's table (Qwen3-235B, TP4) at the scale of a small CPU.
 *
 * One prefill rank and one decode rank, as two processes. For each prompt
 * length the decoder asks for the same request three ways:
 *   colocated      the prefill computes every layer; nothing is transferred
 *                  (its compute time is the colocated TTFT)
 *   disaggregated  the prefill computes and writes each layer as it is done;
 *                  TTFT = admission at the decoder to the last byte there
 *   transfer only  no compute: every layer is written at once; divided by
 *                  the layer count, the per-layer transfer time
 * The compute is a real transformer layer (examples/pd_model.c): a QKV
 * projection, causal GQA attention, output projection and MLP, whose K and
 * V are what gets transferred.
 *
 *   pd-bench prefill --listen HOST:PORT [--provider P] [--nics N]
 *   pd-bench decode --connect HOST:PORT [--provider P] [--nics N] [options]
 *   pd-bench local [options]
 * options: --seqs 128,256,... --reps N --layers N --d-model N --q-heads N
 *          --head-dim N --ffn N --label TEXT
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pd_ctl.h"
#include "pd_model.h"
#include "xfer_kv.h"

#define PAGE_TOKENS 16
#define MAX_SEQS 16

enum mode { COLOC = 1, DISAGG = 2, XFER = 3 };

struct opts {
	const char *role, *listen, *connect, *provider, *nics, *label;
	uint32_t seqs[MAX_SEQS], nseqs, reps;
	struct pd_model m;
};

/* What the decoder tells the prefiller with each request. */
struct ask {
	uint32_t mode;
};

/* What comes back as the request's extra context. */
struct answer {
	uint64_t compute_ns;
	uint32_t first_token;
};

static struct xfer_kv_layout layout(const struct opts *o, uint32_t max_seq)
{
	/* One rank's share: its KV heads, as many pages as the longest prompt. */
	return (struct xfer_kv_layout){.kind = XFER_KV_GQA, .layers = o->m.layers,
				       .pages = (max_seq + PAGE_TOKENS - 1) / PAGE_TOKENS,
				       .page_tokens = PAGE_TOKENS, .kv_heads = o->m.kv_heads,
				       .head_dim = o->m.head_dim, .dtype_bytes = 2, .tp_size = 1};
}

static uint32_t max_seq(const struct opts *o)
{
	uint32_t mx = 0;
	for (uint32_t i = 0; i < o->nseqs; i++)
		mx = o->seqs[i] > mx ? o->seqs[i] : mx;
	return mx;
}

static void attr(const struct opts *o, struct xfer_attr *a)
{
	xfer_attr_init(a);
	a->provider = o->provider;
	a->nics = o->nics;
	a->log_level = 0;
}

/* ---------------------------------------------------------------- prefill */

static uint64_t ns_now(void)
{
	return (uint64_t)(pd_now() * 1e9);
}

static void wait_done(xfer_kv_prefiller_t *p, uint64_t id)
{
	/* The next request reuses these source pages: only once nothing of this
	 * one is in flight. */
	for (;;) {
		struct xfer_kv_pf_event ev;
		if (xfer_kv_pf_poll(p, &ev, 1, 10000) != 1)
			pd_die("waiting for DONE", -ETIMEDOUT);
		if (ev.type == XFER_KV_PF_DONE && ev.id == id) {
			if (ev.status)
				pd_die("request", ev.status);
			return;
		}
	}
}

static void serve_one(const struct opts *o, xfer_kv_prefiller_t *p, const struct xfer_kv_layout *l,
		      void *kv, uint32_t *pages, const struct xfer_kv_pf_event *ev)
{
	struct ask ask = {0};
	memcpy(&ask, ev->app, ev->app_len < sizeof(ask) ? ev->app_len : sizeof(ask));
	int ret = xfer_kv_pf_bind(p, ev->id, pages, ev->npages);
	if (ret)
		pd_die("bind", ret);
	struct answer ans = {0};
	if (ask.mode != XFER) {
		struct pd_run run;
		if ((ret = pd_run_start(&run, &o->m, ev->tokens, ev->id)))
			pd_die("model", ret);
		uint64_t t0 = ns_now();
		for (uint32_t layer = 0; layer < o->m.layers; layer++) {
			pd_layer(&run, layer, l, kv, pages);
			/* The hook a GPU watcher would call: this layer may go now. */
			if (ask.mode == DISAGG && (ret = xfer_kv_pf_layers_done(p, ev->id, layer + 1)))
				pd_die("layers_done", ret);
		}
		ans.compute_ns = ns_now() - t0;
		ans.first_token = pd_first_token(&run);
		pd_run_free(&run);
	}
	if ((ret = xfer_kv_pf_finish(p, ev->id, &ans, sizeof(ans))))
		pd_die("finish", ret);
	wait_done(p, ev->id);
}

static int prefill(const struct opts *o)
{
	int fd = pd_ctl_accept(o->listen);
	if (fd < 0)
		pd_die("control connection", fd);
	uint64_t mx;
	if (pd_ctl_recv_u64(fd, &mx))
		pd_die("control connection", -EPIPE);
	struct opts po = *o;
	po.seqs[0] = (uint32_t)mx;
	po.nseqs = 1;
	struct xfer_kv_layout l = layout(&po, (uint32_t)mx);
	void *kv = calloc(1, xfer_kv_layout_bytes(&l));
	uint32_t *pages = malloc(l.pages * sizeof(uint32_t));
	struct xfer_attr a;
	attr(o, &a);
	struct xfer_kv_pf_config c;
	xfer_kv_pf_config_init(&c);
	c.layout = l;
	c.kv = kv;
	c.ctx_bytes = sizeof(struct answer);
	xfer_kv_prefiller_t *p;
	int ret = kv && pages ? xfer_kv_prefiller_create(&c, &a, &p) : -ENOMEM;
	if (ret)
		pd_die("prefiller", ret);
	/* A scattered page order on the prefill side, as a real pool has. */
	for (uint32_t i = 0; i < l.pages; i++)
		pages[i] = (i * 7919u) % l.pages;
	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(xfer_kv_prefiller_engine(p), addr, sizeof(addr), NULL);
	if (alen < 0 || pd_ctl_send(fd, addr, (size_t)alen))
		pd_die("address", -EPIPE);
	for (;;) {
		struct xfer_kv_pf_event ev;
		int n = xfer_kv_pf_poll(p, &ev, 1, 100);
		if (n == 1 && ev.type == XFER_KV_PF_NEW)
			serve_one(&po, p, &l, kv, pages, &ev);
		else if (n == 0) {
			/* The decoder closes the control connection when it is done. */
			char b;
			if (recv(fd, &b, 1, MSG_DONTWAIT) == 0)
				break;
		}
	}
	xfer_kv_prefiller_destroy(p);
	free(kv);
	free(pages);
	close(fd);
	return 0;
}

/* ----------------------------------------------------------------- decode */

struct sample {
	double elapsed, compute;
};

static struct sample ask_one(xfer_kv_decoder_t *d, uint32_t g, uint64_t id, uint32_t tokens,
			     enum mode mode)
{
	struct ask ask = {.mode = mode};
	struct xfer_kv_request r = {.id = id, .group = g, .tokens = tokens, .timeout_ms = 600000,
				    .app = &ask, .app_len = sizeof(ask)};
	int ret = xfer_kv_dec_admit(d, &r);
	if (ret)
		pd_die("admit", ret);
	struct xfer_kv_dec_event ev;
	if (xfer_kv_dec_poll(d, &ev, 1, 600000) != 1 || ev.status)
		pd_die("request", ev.status ? ev.status : -ETIMEDOUT);
	struct answer ans;
	memcpy(&ans, ev.ctx, sizeof(ans));
	xfer_kv_dec_release(d, id);
	return (struct sample){.elapsed = (double)ev.elapsed_ns / 1e6, .compute = (double)ans.compute_ns / 1e6};
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int decode(const struct opts *o)
{
	int fd = pd_ctl_connect(o->connect, 10000);
	if (fd < 0)
		pd_die("control connection", fd);
	uint32_t mx = max_seq(o);
	pd_ctl_send_u64(fd, mx);
	struct xfer_kv_layout l = layout(o, mx);
	void *kv = calloc(1, xfer_kv_layout_bytes(&l));
	struct xfer_attr a;
	attr(o, &a);
	struct xfer_kv_dec_config c;
	xfer_kv_dec_config_init(&c);
	c.layout = l;
	c.kv = kv;
	c.ctx_bytes = sizeof(struct answer);
	c.max_requests = 4;
	xfer_kv_decoder_t *d;
	int ret = kv ? xfer_kv_decoder_create(&c, &a, &d) : -ENOMEM;
	if (ret)
		pd_die("decoder", ret);
	uint8_t addr[XFER_ADDR_MAX];
	long alen = pd_ctl_recv(fd, addr, sizeof(addr));
	if (alen < 0)
		pd_die("address", (int)alen);
	struct xfer_kv_rank rank = {.addr = addr, .addr_len = (size_t)alen, .layout = l};
	uint32_t g;
	if ((ret = xfer_kv_dec_join(d, &rank, 1, &g)))
		pd_die("join", ret);
	xfer_engine_t *e = xfer_kv_decoder_engine(d);
	const struct pd_model *m = &o->m;
	printf("# pd-bench %s: %s on %s; model per rank: %u layers, d_model %u, %u q heads, %u kv "
	       "head(s) x %u, ffn %u; pages of %u tokens, fp16; median of %u\n",
	       o->label, xfer_engine_provider(e), xfer_engine_nic_name(e, 0), m->layers, m->d_model,
	       m->q_heads, m->kv_heads, m->head_dim, m->ffn, PAGE_TOKENS, o->reps);
	/* overhead = TTFT disagg - TTFT coloc = (its compute, slowed by sharing
	 * the cores with the transfer) - (colocated compute) + tail, the time
	 * from the end of the compute to the last byte at the decoder. */
	printf("%-7s %8s %11s %9s %11s %11s %9s %9s %9s %7s %s\n", "seqlen", "KV/layer", "compute/lyr",
	       "xfer/lyr", "TTFT coloc", "TTFT disagg", "overhead", "slowdown", "tail", "GFLOP/s",
	       "hidden");
	printf("%-7s %8s %11s %9s %11s %11s %9s %9s %9s\n", "tokens", "KiB", "ms", "ms", "ms", "ms", "ms",
	       "ms", "ms");
	fflush(stdout);
	/* Warm the connection (first use pays its setup). */
	ask_one(d, g, 1, PAGE_TOKENS, XFER);
	uint64_t id = 2;
	for (uint32_t s = 0; s < o->nseqs; s++) {
		uint32_t n = o->seqs[s];
		double co[64], di[64], dc[64], tl[64], xf[64];
		uint32_t reps = o->reps < 64 ? o->reps : 64;
		for (uint32_t r = 0; r < reps; r++) {
			co[r] = ask_one(d, g, id++, n, COLOC).compute;
			struct sample sd = ask_one(d, g, id++, n, DISAGG);
			di[r] = sd.elapsed;
			dc[r] = sd.compute;
			tl[r] = sd.elapsed - sd.compute;
			xf[r] = ask_one(d, g, id++, n, XFER).elapsed;
		}
		double coloc = median(co, reps), disagg = median(di, reps), xfer = median(xf, reps);
		double dcomp = median(dc, reps), tail = median(tl, reps);
		double cl = coloc / m->layers, xl = xfer / m->layers;
		double kib = (double)n * 2 * m->kv_heads * m->head_dim * 2 / 1024;
		printf("%-7u %8.1f %11.3f %9.3f %11.2f %11.2f %+9.2f %+9.2f %9.2f %7.2f %s\n", n, kib, cl,
		       xl, coloc, disagg, disagg - coloc, dcomp - coloc, tail,
		       pd_layer_flops(m, n) / (cl * 1e6), xl <= cl ? "yes" : "no");
		fflush(stdout);
	}
	xfer_kv_decoder_destroy(d);
	free(kv);
	close(fd);
	return 0;
}

/* ------------------------------------------------------------------- main */

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s prefill --listen HOST:PORT | decode --connect HOST:PORT | local\n"
			"  [--provider P] [--nics LIST] [--seqs N,N,...] [--reps N] [--layers N]\n"
			"  [--d-model N] [--q-heads N] [--head-dim N] [--ffn N] [--label TEXT]\n",
		argv0);
	exit(2);
}

static uint32_t num(const char *s)
{
	return (uint32_t)strtoul(s, NULL, 0);
}

int main(int argc, char **argv)
{
	/* Defaults: one rank of Qwen3-235B-A22B at TP4 (hidden 4096, 16 query
	 * heads and 1 KV head of 128 per rank, 94 layers), scaled to what one
	 * core computes in seconds: widths /32, query heads /8, head size /2,
	 * layers 94 -> 8; prompts 4K..64K scaled /32. */
	struct opts o = {.provider = "tcp", .label = "", .reps = 3,
			 .seqs = {128, 256, 512, 1024, 2048}, .nseqs = 5,
			 .m = {.layers = 8, .d_model = 128, .q_heads = 2, .kv_heads = 1, .head_dim = 64,
			       .ffn = 192}};
	if (argc < 2)
		usage(argv[0]);
	o.role = argv[1];
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			usage(argv[0]);
		i++;
		if (!strcmp(a, "--listen"))
			o.listen = v;
		else if (!strcmp(a, "--connect"))
			o.connect = v;
		else if (!strcmp(a, "--provider"))
			o.provider = v;
		else if (!strcmp(a, "--nics"))
			o.nics = v;
		else if (!strcmp(a, "--label"))
			o.label = v;
		else if (!strcmp(a, "--reps"))
			o.reps = num(v);
		else if (!strcmp(a, "--layers"))
			o.m.layers = num(v);
		else if (!strcmp(a, "--d-model"))
			o.m.d_model = num(v);
		else if (!strcmp(a, "--q-heads"))
			o.m.q_heads = num(v);
		else if (!strcmp(a, "--head-dim"))
			o.m.head_dim = num(v);
		else if (!strcmp(a, "--ffn"))
			o.m.ffn = num(v);
		else if (!strcmp(a, "--seqs")) {
			char *copy = strdup(v);
			o.nseqs = 0;
			for (char *t = strtok(copy, ","); t && o.nseqs < MAX_SEQS; t = strtok(NULL, ","))
				o.seqs[o.nseqs++] = num(t);
			free(copy);
		} else
			usage(argv[0]);
	}
	if (!o.reps || !o.nseqs || !o.m.layers || !o.m.q_heads || o.m.q_heads % o.m.kv_heads)
		usage(argv[0]);
	for (uint32_t i = 0; i < o.nseqs; i++)
		if (!o.seqs[i] || o.seqs[i] > 65535)
			usage(argv[0]);
	if (!strcmp(o.provider, "tcp") && !o.nics)
		o.nics = "lo";
	if (pd_model_init(&o.m, 7))
		pd_die("model", -ENOMEM);
	if (!strcmp(o.role, "prefill") && o.listen)
		return prefill(&o);
	if (!strcmp(o.role, "decode") && o.connect)
		return decode(&o);
	if (strcmp(o.role, "local"))
		usage(argv[0]);
	char hp[64];
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", 20000 + getpid() % 20000);
	o.listen = o.connect = hp;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		exit(prefill(&o));
	int rc = decode(&o), st = 0;
	waitpid(pid, &st, 0);
	return rc || !WIFEXITED(st) || WEXITSTATUS(st);
}
