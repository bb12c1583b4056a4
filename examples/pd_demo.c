/* pd-demo: prefill/decode disaggregation with the KV module, two processes.
 *
 * The prefiller computes a small transformer layer by layer (for real, on
 * the CPU) and, after each layer, has that layer's KV pages written into the
 * decoder's memory. The decoder admits a few requests of different prompt
 * lengths at once, waits for them, and checks every page of every layer
 * against the checksums the prefiller sends with the first token as the
 * request's extra context. The two sides use different KV layouts (K|V fused
 * per head on the prefill side, separate K and V planes on the decode side).
 *
 *   pd-demo prefill --listen HOST:PORT [--provider P] [--nics N]
 *   pd-demo decode --connect HOST:PORT [--provider P] [--nics N] [--tokens 300,1000,...]
 *   pd-demo local [--provider P] [--tokens ...]     both, forked, over loopback
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pd_ctl.h"
#include "pd_model.h"
#include "xfer_kv.h"

#define LAYERS 8
#define KV_HEADS 2
#define HEAD_DIM 64
#define PAGE_TOKENS 16
#define POOL_PAGES 1024u
#define MAX_TOKENS 4096u
#define MAX_REQ 16
#define MAX_PAGES (MAX_TOKENS / PAGE_TOKENS)

/* The extra context: the first token and a checksum of every page of every
 * layer, as the prefiller computed them. */
struct ctx {
	uint32_t first_token, layers, npages, pad;
	uint64_t t_start_ns, t_finish_ns; /* CLOCK_MONOTONIC: both processes share a host */
	uint64_t sums[LAYERS * MAX_PAGES];
};

#define CTX_HEAD offsetof(struct ctx, sums)

static uint64_t mono_ns(void)
{
	return (uint64_t)(pd_now() * 1e9);
}

struct opts {
	const char *role, *listen, *connect, *provider, *nics;
	uint32_t tokens[MAX_REQ], nreq;
};

static struct xfer_kv_layout layout(int prefill)
{
	return (struct xfer_kv_layout){.kind = XFER_KV_GQA, .layers = LAYERS, .pages = POOL_PAGES,
				       .page_tokens = PAGE_TOKENS, .kv_heads = KV_HEADS,
				       .head_dim = HEAD_DIM, .dtype_bytes = 2, .fused = prefill ? 1 : 0,
				       .tp_size = 1, .tp_rank = 0};
}

static void engine_attr(const struct opts *o, struct xfer_attr *a)
{
	xfer_attr_init(a);
	a->provider = o->provider;
	a->nics = o->nics;
	a->heartbeat_ms = 200;
	a->log_level = 0; /* the peer going away at the end is expected here */
}

/* --------------------------------------------------------------- prefill */

struct pf_state {
	xfer_kv_prefiller_t *p;
	struct xfer_kv_layout l;
	void *kv;
	struct pd_model m;
	uint32_t free_pages[POOL_PAGES], nfree;
	uint64_t queue[MAX_REQ * 4];
	uint32_t qlen;
	struct {
		uint64_t id;
		uint32_t *pages, n;
	} busy[MAX_REQ * 4]; /* source pages until their request is DONE */
};

static void pages_back(struct pf_state *s, uint64_t id)
{
	for (int i = 0; i < MAX_REQ * 4; i++)
		if (s->busy[i].pages && s->busy[i].id == id) {
			memcpy(s->free_pages + s->nfree, s->busy[i].pages, s->busy[i].n * sizeof(uint32_t));
			s->nfree += s->busy[i].n;
			free(s->busy[i].pages);
			s->busy[i].pages = NULL;
		}
}

static void pf_events(struct pf_state *s, uint64_t wait_ms)
{
	struct xfer_kv_pf_event ev[8];
	int n = xfer_kv_pf_poll(s->p, ev, 8, wait_ms);
	for (int i = 0; i < n; i++) {
		if (ev[i].type == XFER_KV_PF_NEW && s->qlen < MAX_REQ * 4)
			s->queue[s->qlen++] = ev[i].id << 16 | ev[i].tokens;
		if (ev[i].type == XFER_KV_PF_DONE && ev[i].status)
			fprintf(stderr, "prefill: request %llu ended with %s\n",
				(unsigned long long)ev[i].id, xfer_strerror(ev[i].status));
		if (ev[i].type == XFER_KV_PF_DONE)
			pages_back(s, ev[i].id); /* nothing of it is in flight any more */
	}
}

static void prefill_one(struct pf_state *s, uint64_t id, uint32_t tokens)
{
	uint32_t np = (tokens + PAGE_TOKENS - 1) / PAGE_TOKENS;
	if (tokens > MAX_TOKENS || np > s->nfree) {
		fprintf(stderr, "prefill: request %llu too large\n", (unsigned long long)id);
		return;
	}
	int slot = 0;
	while (slot < MAX_REQ * 4 && s->busy[slot].pages)
		slot++;
	uint32_t *pages = malloc(np * sizeof(uint32_t));
	if (slot == MAX_REQ * 4 || !pages)
		pd_die("too many requests at once", -ENOSPC);
	memcpy(pages, s->free_pages + (s->nfree -= np), np * sizeof(uint32_t));
	s->busy[slot].id = id;
	s->busy[slot].pages = pages;
	s->busy[slot].n = np;
	int ret = xfer_kv_pf_bind(s->p, id, pages, np);
	if (ret)
		pd_die("bind", ret);
	struct pd_run run;
	if ((ret = pd_run_start(&run, &s->m, tokens, id)))
		pd_die("model", ret);
	static struct ctx c;
	c.layers = LAYERS;
	c.npages = np;
	c.t_start_ns = mono_ns();
	for (uint32_t l = 0; l < LAYERS; l++) {
		pd_layer(&run, l, &s->l, s->kv, pages);
		/* This layer's pages go out now, while the next layer computes. */
		if ((ret = xfer_kv_pf_layers_done(s->p, id, l + 1)))
			pd_die("layers_done", ret);
		for (uint32_t i = 0; i < np; i++)
			c.sums[l * np + i] = pd_page_sum(&s->l, s->kv, l, pages[i]);
		pf_events(s, 0);
	}
	c.first_token = pd_first_token(&run);
	pd_run_free(&run);
	c.t_finish_ns = mono_ns();
	if ((ret = xfer_kv_pf_finish(s->p, id, &c, (uint32_t)(CTX_HEAD + 8ull * LAYERS * np))))
		pd_die("finish", ret);
}

static int prefill(const struct opts *o)
{
	int fd = pd_ctl_accept(o->listen);
	if (fd < 0)
		pd_die("control connection", fd);
	struct pf_state *s = calloc(1, sizeof(*s));
	s->l = layout(1);
	s->kv = calloc(1, xfer_kv_layout_bytes(&s->l));
	s->m = (struct pd_model){.layers = LAYERS, .d_model = 128, .q_heads = KV_HEADS,
				 .kv_heads = KV_HEADS, .head_dim = HEAD_DIM, .ffn = 256};
	if (!s->kv || pd_model_init(&s->m, 42))
		pd_die("memory", -ENOMEM);
	for (uint32_t i = 0; i < POOL_PAGES; i++)
		s->free_pages[i] = POOL_PAGES - 1 - i;
	s->nfree = POOL_PAGES;
	struct xfer_attr a;
	engine_attr(o, &a);
	struct xfer_kv_pf_config c;
	xfer_kv_pf_config_init(&c);
	c.layout = s->l;
	c.kv = s->kv;
	c.ctx_bytes = sizeof(struct ctx);
	int ret = xfer_kv_prefiller_create(&c, &a, &s->p);
	if (ret)
		pd_die("prefiller", ret);
	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(xfer_kv_prefiller_engine(s->p), addr, sizeof(addr), NULL);
	if (alen < 0 || pd_ctl_send(fd, addr, (size_t)alen))
		pd_die("sending the address", alen < 0 ? alen : -EPIPE);
	printf("prefill: %s on %s, serving\n", xfer_engine_provider(xfer_kv_prefiller_engine(s->p)),
	       xfer_engine_nic_name(xfer_kv_prefiller_engine(s->p), 0));
	fflush(stdout);
	uint64_t expected = 0;
	if (pd_ctl_recv_u64(fd, &expected))
		pd_die("control connection", -EPIPE);
	double t0 = 0;
	for (uint64_t served = 0; served < expected;) {
		pf_events(s, 20);
		while (s->qlen) {
			uint64_t q = s->queue[0];
			memmove(s->queue, s->queue + 1, --s->qlen * sizeof(uint64_t));
			if (!t0)
				t0 = pd_now();
			prefill_one(s, q >> 16, (uint32_t)(q & 0xffff));
			served++;
		}
	}
	uint64_t bye;
	pd_ctl_recv_u64(fd, &bye); /* the decoder has verified everything */
	struct xfer_kv_pf_stats st;
	xfer_kv_pf_stats(s->p, &st);
	printf("prefill: %llu requests, %llu paged+context writes, %.1f MiB of KV written\n",
	       (unsigned long long)st.requests, (unsigned long long)st.writes, st.bytes / 1048576.0);
	fflush(stdout);
	xfer_kv_prefiller_destroy(s->p);
	pd_model_free(&s->m);
	free(s->kv);
	free(s);
	close(fd);
	return 0;
}

/* ---------------------------------------------------------------- decode */

static int verify(const struct xfer_kv_layout *l, const void *kv, const struct xfer_kv_dec_event *ev,
		  uint32_t *first)
{
	const struct ctx *c = ev->ctx;
	if (c->layers != LAYERS || c->npages != ev->npages)
		return -1;
	int bad = 0;
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		for (uint32_t i = 0; i < ev->npages; i++)
			bad += pd_page_sum(l, kv, layer, ev->pages[i]) != c->sums[layer * ev->npages + i];
	*first = c->first_token;
	return bad;
}

static int decode(const struct opts *o)
{
	int fd = pd_ctl_connect(o->connect, 10000);
	if (fd < 0)
		pd_die("control connection", fd);
	struct xfer_kv_layout l = layout(0);
	void *kv = calloc(1, xfer_kv_layout_bytes(&l));
	struct xfer_attr a;
	engine_attr(o, &a);
	struct xfer_kv_dec_config c;
	xfer_kv_dec_config_init(&c);
	c.layout = l;
	c.kv = kv;
	c.ctx_bytes = sizeof(struct ctx);
	c.max_requests = MAX_REQ;
	xfer_kv_decoder_t *d;
	int ret = kv ? xfer_kv_decoder_create(&c, &a, &d) : -ENOMEM;
	if (ret)
		pd_die("decoder", ret);
	uint8_t addr[XFER_ADDR_MAX];
	long alen = pd_ctl_recv(fd, addr, sizeof(addr));
	if (alen < 0)
		pd_die("receiving the prefiller's address", (int)alen);
	struct xfer_kv_rank r = {.addr = addr, .addr_len = (size_t)alen, .layout = layout(1)};
	uint32_t g;
	if ((ret = xfer_kv_dec_join(d, &r, 1, &g)))
		pd_die("join", ret);
	xfer_engine_t *e = xfer_kv_decoder_engine(d);
	printf("decode:  %s on %s, %u requests at once\n", xfer_engine_provider(e),
	       xfer_engine_nic_name(e, 0), o->nreq);
	fflush(stdout);
	pd_ctl_send_u64(fd, o->nreq);
	double t0 = pd_now();
	for (uint32_t i = 0; i < o->nreq; i++) {
		struct xfer_kv_request q = {.id = i + 1, .group = g, .tokens = o->tokens[i],
					    .timeout_ms = 60000};
		if ((ret = xfer_kv_dec_admit(d, &q)))
			pd_die("admit", ret);
	}
	uint64_t kv_bytes = 0, pages = 0;
	int failed = 0;
	for (uint32_t got = 0; got < o->nreq;) {
		struct xfer_kv_dec_event ev[MAX_REQ];
		int n = xfer_kv_dec_poll(d, ev, MAX_REQ, 60000);
		if (n <= 0)
			pd_die("waiting for requests", n ? n : -ETIMEDOUT);
		for (int i = 0; i < n; i++, got++) {
			uint32_t first = 0;
			int bad = ev[i].status ? -1 : verify(&l, kv, &ev[i], &first);
			uint64_t bytes = (uint64_t)ev[i].npages * LAYERS * 2 * KV_HEADS *
					 xfer_kv_head_bytes(&l);
			double s = (double)ev[i].elapsed_ns / 1e9;
			const struct ctx *cx = ev[i].ctx;
			double compute = (double)(cx->t_finish_ns - cx->t_start_ns) / 1e9;
			double tail = (double)((int64_t)(mono_ns() - cx->t_finish_ns)) / 1e9;
			if (ev[i].status || bad) {
				printf("decode:  request %llu FAILED: %s, %d pages wrong\n",
				       (unsigned long long)ev[i].id, xfer_strerror(ev[i].status), bad);
				failed++;
			} else {
				printf("decode:  request %llu: %5u tokens, %3u pages x %u layers = %5.2f MiB, "
				       "done %.3f s after admission (prefill compute %.3f s, last layer "
				       "landed %.1f ms after it); %u page checksums OK, first token %u\n",
				       (unsigned long long)ev[i].id, o->tokens[ev[i].id - 1], ev[i].npages,
				       LAYERS, bytes / 1048576.0, s, compute, tail * 1e3,
				       ev[i].npages * LAYERS, first);
				fflush(stdout);
				kv_bytes += bytes;
				pages += ev[i].npages;
			}
			xfer_kv_dec_release(d, ev[i].id);
		}
	}
	double wall = pd_now() - t0;
	struct xfer_kv_dec_stats st;
	xfer_kv_dec_stats(d, &st);
	struct xfer_stats es;
	xfer_engine_stats(e, &es);
	printf("decode:  %u/%u requests verified: %.1f MiB of KV (%llu pages x %u layers) in %.3f s "
	       "wall (%.1f MiB/s, paced by the prefill's compute); %llu immediates counted\n",
	       o->nreq - failed, o->nreq, kv_bytes / 1048576.0, (unsigned long long)pages, LAYERS,
	       wall, kv_bytes / 1048576.0 / wall, (unsigned long long)es.imms_received);
	fflush(stdout);
	xfer_kv_decoder_destroy(d);
	pd_ctl_send_u64(fd, 1);
	free(kv);
	close(fd);
	return failed || st.failed ? 1 : 0;
}

/* ------------------------------------------------------------------- main */

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s prefill --listen HOST:PORT | decode --connect HOST:PORT | local\n"
		"          [--provider P] [--nics LIST] [--tokens N,N,...]\n",
		argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	struct opts o = {.provider = "tcp", .tokens = {300, 1000, 2000, 700}, .nreq = 4};
	if (argc < 2)
		usage(argv[0]);
	o.role = argv[1];
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--listen") && i + 1 < argc)
			o.listen = argv[++i];
		else if (!strcmp(argv[i], "--connect") && i + 1 < argc)
			o.connect = argv[++i];
		else if (!strcmp(argv[i], "--provider") && i + 1 < argc)
			o.provider = argv[++i];
		else if (!strcmp(argv[i], "--nics") && i + 1 < argc)
			o.nics = argv[++i];
		else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
			o.nreq = 0;
			for (char *t = strtok(argv[++i], ","); t && o.nreq < MAX_REQ; t = strtok(NULL, ","))
				o.tokens[o.nreq++] = (uint32_t)strtoul(t, NULL, 0);
		} else
			usage(argv[0]);
	}
	for (uint32_t i = 0; i < o.nreq; i++)
		if (!o.tokens[i] || o.tokens[i] > MAX_TOKENS) {
			fprintf(stderr, "pd-demo: prompts of 1..%u tokens\n", MAX_TOKENS);
			return 2;
		}
	if (!strcmp(o.provider, "tcp") && !o.nics)
		o.nics = "lo";
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
