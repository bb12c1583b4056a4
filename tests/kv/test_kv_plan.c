/* Paged-write plans against a byte-level simulation: for every pair of
 * layouts (GQA and MLA, 1-16 heads, TP 1-8 on either side, K|V fused or
 * not), applying every source rank's plan as the engine would must leave
 * each destination rank with exactly its heads, every byte written once,
 * and exactly one source rank writing its extra context. */
#include <string.h>

#include "kv_test.h"

#define PAGES 3u

static const uint32_t src_pages[PAGES] = {2, 0, 1}, dst_pages[PAGES] = {1, 2, 0};

static struct xfer_kv_layout small(uint32_t kind, uint32_t heads, uint32_t tp, uint32_t rank,
				   uint32_t fused)
{
	return (struct xfer_kv_layout){.kind = kind, .layers = 2, .pages = PAGES, .page_tokens = 2,
				       .kv_heads = heads, .head_dim = 3, .dtype_bytes = 1,
				       .fused = fused, .tp_size = tp, .tp_rank = rank};
}

static uint8_t tag(uint32_t layer, uint32_t i, uint32_t head, uint32_t c, uint64_t b)
{
	uint64_t s = (uint64_t)layer << 40 ^ (uint64_t)i << 32 ^ (uint64_t)head << 16 ^ c << 8 ^ b;
	return (uint8_t)(t_rand(&s) | 1); /* never 0, the untouched value */
}

static uint32_t comps(uint32_t kind)
{
	return kind == XFER_KV_GQA ? 2 : 1;
}

/* Fills a source rank's pool so that every byte says what it is. */
static void fill_src(const struct xfer_kv_layout *l, uint8_t *kv)
{
	uint32_t first, n = xfer_kv_local_heads(l, &first);
	for (uint32_t layer = 0; layer < l->layers; layer++)
		for (uint32_t i = 0; i < PAGES; i++)
			for (uint32_t h = first; h < first + n; h++)
				for (uint32_t c = 0; c < comps(l->kind); c++)
					for (uint64_t b = 0; b < xfer_kv_head_bytes(l); b++)
						kv[xfer_kv_offset(l, layer, src_pages[i], h, c) + b] =
							tag(layer, i, h, c, b);
}

static int check_pair(uint32_t kind, uint32_t heads, uint32_t tp_s, uint32_t tp_d, uint32_t fs,
		      uint32_t fd)
{
	struct xfer_kv_layout s0 = small(kind, heads, tp_s, 0, fs), d0 = small(kind, heads, tp_d, 0, fd);
	if (xfer_kv_layout_check(&s0) || xfer_kv_layout_check(&d0))
		return 0;
	struct xfer_kv_plan *plan = malloc(sizeof(*plan));
	CHECK(plan);
	for (uint32_t j = 0; j < tp_d; j++) {
		struct xfer_kv_layout dl = small(kind, heads, tp_d, j, fd);
		size_t dbytes = xfer_kv_layout_bytes(&dl);
		uint8_t *dst = calloc(1, dbytes), *times = calloc(1, dbytes);
		CHECK(dst && times);
		uint32_t ctx_writers = 0;
		for (uint32_t r = 0; r < tp_s; r++) {
			struct xfer_kv_layout sl = small(kind, heads, tp_s, r, fs);
			uint8_t *src = calloc(1, xfer_kv_layout_bytes(&sl));
			CHECK(src);
			fill_src(&sl, src);
			CHECK_OK(xfer_kv_plan(&sl, &dl, plan));
			ctx_writers += plan->writes_ctx;
			CHECK(xfer_kv_plan_count(plan, 2, PAGES) == plan->nsegs * 2 * PAGES + plan->writes_ctx);
			for (uint32_t layer = 0; layer < 2; layer++)
				for (uint32_t k = 0; k < plan->nsegs; k++)
					for (uint32_t i = 0; i < PAGES; i++) {
						const struct xfer_kv_seg *sg = &plan->segs[k];
						uint64_t so = layer * plan->src_layer_stride + sg->src_off +
							      src_pages[i] * plan->src_page_stride;
						uint64_t doff = layer * plan->dst_layer_stride + sg->dst_off +
								dst_pages[i] * plan->dst_page_stride;
						CHECK(so + sg->len <= xfer_kv_layout_bytes(&sl));
						CHECK(doff + sg->len <= dbytes);
						memcpy(dst + doff, src + so, sg->len);
						for (uint64_t b = 0; b < sg->len; b++)
							times[doff + b]++;
					}
			free(src);
		}
		CHECK(ctx_writers == 1);
		/* Each destination byte written exactly once... */
		for (size_t b = 0; b < dbytes; b++)
			CHECK(times[b] == 1);
		/* ...with what its own head, component, layer and page should hold. */
		uint32_t first, n = xfer_kv_local_heads(&dl, &first);
		for (uint32_t layer = 0; layer < 2; layer++)
			for (uint32_t i = 0; i < PAGES; i++)
				for (uint32_t h = first; h < first + n; h++)
					for (uint32_t c = 0; c < comps(kind); c++)
						for (uint64_t b = 0; b < xfer_kv_head_bytes(&dl); b++)
							CHECK(dst[xfer_kv_offset(&dl, layer, dst_pages[i], h, c) + b] ==
							      tag(layer, i, h, c, b));
		free(dst);
		free(times);
	}
	free(plan);
	return 1;
}

/* Contiguous heads stay one write: the fewest segments the layouts allow. */
static void check_merging(void)
{
	struct xfer_kv_plan *p = malloc(sizeof(*p));
	CHECK(p);
	struct xfer_kv_layout a = small(XFER_KV_GQA, 8, 1, 0, 0), b = small(XFER_KV_GQA, 8, 2, 1, 0);
	CHECK_OK(xfer_kv_plan(&a, &b, p));
	CHECK(p->nsegs == 2); /* four heads of K, four of V */
	a.fused = b.fused = 1;
	CHECK_OK(xfer_kv_plan(&a, &b, p));
	CHECK(p->nsegs == 1); /* K|V of four heads, side by side on both ends */
	b.fused = 0;
	CHECK_OK(xfer_kv_plan(&a, &b, p));
	CHECK(p->nsegs == 8); /* fused to separate: nothing is adjacent on both ends */
	struct xfer_kv_layout m4 = small(XFER_KV_MLA, 1, 4, 0, 0), m2 = small(XFER_KV_MLA, 1, 2, 0, 0);
	for (uint32_t r = 0; r < 4; r++) {
		m4.tp_rank = r;
		for (uint32_t j = 0; j < 2; j++) {
			m2.tp_rank = j;
			CHECK_OK(xfer_kv_plan(&m4, &m2, p));
			CHECK(p->nsegs == (r == j)); /* the latent from one rank only */
		}
	}
	/* Models that differ cannot exchange pages. */
	b = a;
	b.head_dim++;
	CHECK_RC(xfer_kv_plan(&a, &b, p), -EINVAL);
	b = a;
	b.page_tokens++;
	CHECK_RC(xfer_kv_plan(&a, &b, p), -EINVAL);
	b = a;
	b.tp_size = 3;
	CHECK(xfer_kv_layout_check(&b) == -EINVAL && xfer_kv_layout_why(&b));
	free(p);
}

int main(void)
{
	check_merging();
	static const uint32_t heads[] = {1, 2, 4, 8, 16}, tps[] = {1, 2, 4, 8};
	int pairs = 0;
	for (uint32_t kind = XFER_KV_GQA; kind <= XFER_KV_MLA; kind++)
		for (uint32_t h = 0; h < 5; h++)
			for (uint32_t s = 0; s < 4; s++)
				for (uint32_t d = 0; d < 4; d++)
					for (uint32_t f = 0; f < (kind == XFER_KV_GQA ? 4u : 1u); f++)
						pairs += check_pair(kind, kind == XFER_KV_MLA ? 1 : heads[h],
								    tps[s], tps[d], f & 1, f >> 1);
	fprintf(stderr, "%d layout pairs simulated\n", pairs);
	CHECK(pairs > 300);
	return 0;
}
