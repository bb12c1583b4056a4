#include "kv_test.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t kvt_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct xfer_kv_layout kvt_layout(uint32_t kind, uint32_t heads, uint32_t tp, uint32_t rank,
				 uint32_t pages, uint32_t fused)
{
	return (struct xfer_kv_layout){.kind = kind, .layers = KVT_LAYERS, .pages = pages,
				       .page_tokens = KVT_PAGE_TOKENS,
				       .kv_heads = kind == XFER_KV_MLA ? 1 : heads,
				       .head_dim = KVT_HEAD_DIM, .dtype_bytes = KVT_DTYPE,
				       .fused = kind == XFER_KV_MLA ? 0 : fused, .tp_size = tp,
				       .tp_rank = rank};
}

void *kvt_pool(const struct xfer_kv_layout *l, uint8_t poison)
{
	CHECK_OK(xfer_kv_layout_check(l));
	size_t n = xfer_kv_layout_bytes(l);
	void *kv = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	CHECK(kv);
	memset(kv, poison, n);
	return kv;
}

static uint32_t comps(const struct xfer_kv_layout *l)
{
	return l->kind == XFER_KV_GQA ? 2 : 1;
}

/* The data of (request, layer, head, component, page of the request) is the
 * same wherever it is stored, so both sides derive it independently. */
static uint64_t seed(uint64_t req, uint32_t layer, uint32_t head, uint32_t c, uint32_t i)
{
	return req * 0x9e3779b97f4a7c15ull ^ (uint64_t)layer << 48 ^ (uint64_t)head << 36 ^
	       (uint64_t)c << 32 ^ i;
}

void kvt_fill(const struct xfer_kv_layout *l, void *kv, const uint32_t *pages, uint32_t n,
	      uint64_t req, uint32_t layer)
{
	uint32_t first, nh = xfer_kv_local_heads(l, &first);
	uint64_t hb = xfer_kv_head_bytes(l);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t h = first; h < first + nh; h++)
			for (uint32_t c = 0; c < comps(l); c++)
				t_fill((uint8_t *)kv + xfer_kv_offset(l, layer, pages[i], h, c), hb,
				       seed(req, layer, h, c, i));
}

uint64_t kvt_verify(const struct xfer_kv_layout *l, const void *kv, const uint32_t *pages,
		    uint32_t n, uint64_t req)
{
	uint32_t first, nh = xfer_kv_local_heads(l, &first);
	uint64_t hb = xfer_kv_head_bytes(l), bad = 0;
	uint8_t *want = malloc(hb);
	CHECK(want);
	for (uint32_t layer = 0; layer < l->layers; layer++)
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t h = first; h < first + nh; h++)
				for (uint32_t c = 0; c < comps(l); c++) {
					t_fill(want, hb, seed(req, layer, h, c, i));
					bad += memcmp((const uint8_t *)kv +
							      xfer_kv_offset(l, layer, pages[i], h, c),
						      want, hb) != 0;
				}
	free(want);
	return bad;
}

void kvt_poison(const struct xfer_kv_layout *l, void *kv, const uint32_t *pages, uint32_t n,
		uint8_t v)
{
	uint32_t first, nh = xfer_kv_local_heads(l, &first);
	for (uint32_t layer = 0; layer < l->layers; layer++)
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t h = first; h < first + nh; h++)
				for (uint32_t c = 0; c < comps(l); c++)
					memset((uint8_t *)kv + xfer_kv_offset(l, layer, pages[i], h, c), v,
					       xfer_kv_head_bytes(l));
}

bool kvt_is_poison(const struct xfer_kv_layout *l, const void *kv, const uint32_t *pages,
		   uint32_t n, uint8_t v)
{
	uint32_t first, nh = xfer_kv_local_heads(l, &first);
	uint64_t hb = xfer_kv_head_bytes(l);
	for (uint32_t layer = 0; layer < l->layers; layer++)
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t h = first; h < first + nh; h++)
				for (uint32_t c = 0; c < comps(l); c++) {
					const uint8_t *p = (const uint8_t *)kv +
							   xfer_kv_offset(l, layer, pages[i], h, c);
					for (uint64_t b = 0; b < hb; b++)
						if (p[b] != v)
							return false;
				}
	return true;
}

void kvt_ctx(void *buf, uint32_t len, uint64_t req)
{
	t_fill(buf, len, req ^ 0xc0ffee);
}

void kvt_attr(struct xfer_attr *a, uint32_t heartbeat_ms)
{
	t_attr(a);
	a->heartbeat_ms = heartbeat_ms;
	/* Detection in ten intervals: probes queue behind data, and two shared
	 * cores (or a sanitizer) make a busy peer look slow. */
	a->heartbeat_misses = 10;
	a->timeout_ms = 10000;
	/* Shared cores: a short spin leaves time to the other processes. */
	a->spin_us = 20;
}

xfer_kv_prefiller_t *kvt_prefiller(const struct xfer_kv_layout *l, void **kv, uint32_t heartbeat_ms)
{
	struct xfer_attr a;
	kvt_attr(&a, heartbeat_ms);
	struct xfer_kv_pf_config c;
	xfer_kv_pf_config_init(&c);
	c.layout = *l;
	c.kv = *kv = kvt_pool(l, 0);
	c.ctx_bytes = KVT_CTX;
	c.job_timeout_ms = 10000;
	xfer_kv_prefiller_t *p = NULL;
	int rc = xfer_kv_prefiller_create(&c, &a, &p);
	if (rc == -XFER_ENOPROV || rc == -ENODEV) {
		fprintf(stderr, "SKIP: provider %s not available\n", a.provider);
		exit(T_SKIP);
	}
	CHECK_OK(rc);
	return p;
}

xfer_kv_decoder_t *kvt_decoder(const struct xfer_kv_layout *l, void **kv, uint32_t heartbeat_ms,
			       uint32_t max_requests)
{
	struct xfer_attr a;
	kvt_attr(&a, heartbeat_ms);
	struct xfer_kv_dec_config c;
	xfer_kv_dec_config_init(&c);
	c.layout = *l;
	c.kv = *kv = kvt_pool(l, KVT_POISON);
	c.ctx_bytes = KVT_CTX;
	c.max_requests = max_requests;
	c.cancel_ms = 1000;
	xfer_kv_decoder_t *d = NULL;
	int rc = xfer_kv_decoder_create(&c, &a, &d);
	if (rc == -XFER_ENOPROV || rc == -ENODEV) {
		fprintf(stderr, "SKIP: provider %s not available\n", a.provider);
		exit(T_SKIP);
	}
	CHECK_OK(rc);
	return d;
}

void kvt_send_addr(int fd, xfer_engine_t *e)
{
	uint8_t addr[XFER_ADDR_MAX];
	int len = xfer_engine_addr(e, addr, sizeof(addr), NULL);
	CHECK(len > 0);
	t_send_blob(fd, addr, (size_t)len);
}

struct xfer_kv_dec_event kvt_event(xfer_kv_decoder_t *d, uint64_t timeout_ms)
{
	struct xfer_kv_dec_event ev;
	int n = xfer_kv_dec_poll(d, &ev, 1, timeout_ms);
	if (n != 1) {
		fprintf(stderr, "no decoder event within %llu ms\n", (unsigned long long)timeout_ms);
		exit(1);
	}
	return ev;
}

/* --------------------------------------------------------- prefill server */

struct job {
	uint64_t id;
	uint32_t *pages, n, layer;
	bool stopped, live;
};

#define MAX_SERVED 64

static struct job *job_of(struct job *jobs, uint64_t id)
{
	for (int i = 0; i < MAX_SERVED; i++)
		if (jobs[i].live && jobs[i].id == id)
			return &jobs[i];
	return NULL;
}

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Busy, not asleep: a prefill's compute keeps its core. */
static void busy_us(uint32_t us)
{
	uint64_t until = now_us() + us;
	while (now_us() < until)
		;
}

/* Dies (or freezes) in the middle of a request, and in the middle of
 * posting, except on libfabric's shm (ofi-shm): it takes a spin lock inside
 * the receiver's shared region to post, and a process killed or stopped
 * while holding it leaves the receiver's progress spinning until it resumes,
 * or forever. So there it waits until the writes submitted so far have
 * completed (the next layers are still to come). xfer's shm holds no lock
 * in shared memory. */
static void stop_between_writes(xfer_kv_prefiller_t *p, int sig)
{
	xfer_engine_t *e = xfer_kv_prefiller_engine(p);
	if (!strcmp(xfer_engine_provider(e), "ofi-shm")) {
		uint64_t until = kvt_ms() + 2000;
		struct xfer_stats st;
		do {
			usleep(1000);
			xfer_engine_stats(e, &st);
		} while (st.ops_completed < st.ops_submitted && kvt_ms() < until);
	}
	raise(sig);
}

static int command(int fd)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	if (poll(&pf, 1, 0) != 1)
		return -1;
	return (int)t_recv_u64(fd);
}

void kvt_prefill_serve(xfer_kv_prefiller_t *p, const struct xfer_kv_layout *l, void *kv, int fd,
		       struct kvt_serve *o)
{
	struct job jobs[MAX_SERVED] = {0};
	/* The prefill's own pool, handed out in a scrambled order so that
	 * source and destination page numbers differ. */
	uint32_t *free_pages = malloc(l->pages * sizeof(uint32_t)), nfree = l->pages;
	CHECK(free_pages);
	uint64_t rs = l->tp_rank + 7;
	for (uint32_t i = 0; i < nfree; i++)
		free_pages[i] = i;
	for (uint32_t i = nfree - 1; i > 0; i--) {
		uint32_t k = (uint32_t)(t_rand(&rs) % (i + 1)), t = free_pages[i];
		free_pages[i] = free_pages[k];
		free_pages[k] = t;
	}
	uint32_t layers_total = 0;
	bool leaving = false, stopping = false;
	uint64_t stop_by = 0;
	for (;;) {
		int cmd = stopping ? -1 : command(fd);
		if (cmd == 0) {
			/* Completions of the last writes may trail the decoders' events. */
			stopping = true;
			stop_by = kvt_ms() + 5000;
		}
		if (stopping) {
			bool live = false;
			for (int i = 0; i < MAX_SERVED; i++)
				live |= jobs[i].live;
			if (!live || kvt_ms() > stop_by)
				break;
		}
		if (cmd == 1 && !leaving) {
			leaving = true;
			CHECK_OK(xfer_kv_pf_leave(p));
		}
		struct xfer_kv_pf_event ev[8];
		bool busy = false;
		for (int i = 0; i < MAX_SERVED; i++)
			busy |= jobs[i].live && !jobs[i].stopped && jobs[i].layer <= l->layers;
		int n = xfer_kv_pf_poll(p, ev, 8, busy ? 0 : 5);
		CHECK(n >= 0);
		for (int k = 0; k < n; k++) {
			struct job *j = job_of(jobs, ev[k].id);
			if (ev[k].type == XFER_KV_PF_LEFT) {
				t_send_u64(fd, 1); /* tell the parent */
			} else if (ev[k].type == XFER_KV_PF_NEW && !o->ignore) {
				CHECK(!j && nfree >= ev[k].npages);
				for (j = jobs; j->live; j++)
					;
				*j = (struct job){.id = ev[k].id, .n = ev[k].npages, .live = true,
						  .pages = malloc(ev[k].npages * sizeof(uint32_t))};
				CHECK(j->pages);
				nfree -= j->n;
				memcpy(j->pages, free_pages + nfree, j->n * sizeof(uint32_t));
				int rc = xfer_kv_pf_bind(p, j->id, j->pages, j->n);
				if (rc == -ESTALE) {
					/* Every decode rank gave up before we started. */
					memcpy(free_pages + nfree, j->pages, j->n * sizeof(uint32_t));
					nfree += j->n;
					free(j->pages);
					j->live = false;
					o->cancelled++;
					continue;
				}
				CHECK_OK(rc);
			} else if (ev[k].type == XFER_KV_PF_CANCELLED && j) {
				j->stopped = true;
				o->cancelled++;
			} else if (ev[k].type == XFER_KV_PF_DONE && j) {
				memcpy(free_pages + nfree, j->pages, j->n * sizeof(uint32_t));
				nfree += j->n;
				free(j->pages);
				j->live = false;
				o->served += ev[k].status == 0;
			}
		}
		/* One layer of every job in progress per round, as a batch would. */
		for (int i = 0; i < MAX_SERVED; i++) {
			struct job *j = &jobs[i];
			if (!j->live || j->stopped || j->layer > l->layers)
				continue;
			if (j->layer == l->layers) {
				uint8_t ctx[KVT_CTX];
				kvt_ctx(ctx, sizeof(ctx), j->id);
				int rc = xfer_kv_pf_finish(p, j->id, ctx, sizeof(ctx));
				CHECK(rc == 0 || rc == -ENOENT);
				j->layer++;
				continue;
			}
			kvt_fill(l, kv, j->pages, j->n, j->id, j->layer);
			if (o->layer_us)
				busy_us(o->layer_us);
			int rc = xfer_kv_pf_layers_done(p, j->id, ++j->layer);
			CHECK(rc == 0 || rc == -ENOENT);
			++layers_total;
			if (o->die_after && layers_total == o->die_after)
				stop_between_writes(p, SIGKILL);
			if (o->freeze_after && layers_total == o->freeze_after)
				stop_between_writes(p, SIGSTOP);
		}
	}
	for (int i = 0; i < MAX_SERVED; i++)
		free(jobs[i].live ? jobs[i].pages : NULL);
	free(free_pages);
}
