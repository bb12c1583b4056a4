/* KV layouts: which heads a rank holds, where they live in its pool, and the
 * paged-write plan between a source rank and a destination rank. Pure
 * arithmetic, shared by both sides so that the decoder's expected immediate
 * count and the prefiller's writes are derived from the same rules. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xfer_kv.h"

const char *xfer_kv_layout_why(const struct xfer_kv_layout *l)
{
	if (!l)
		return "no layout";
	if (l->kind != XFER_KV_GQA && l->kind != XFER_KV_MLA)
		return "kind must be XFER_KV_GQA or XFER_KV_MLA";
	if (!l->layers || !l->pages || !l->page_tokens || !l->head_dim || !l->dtype_bytes)
		return "layers, pages, page_tokens, head_dim and dtype_bytes must be non-zero";
	if (!l->kv_heads || l->kv_heads > XFER_KV_HEADS_MAX)
		return "kv_heads must be 1..XFER_KV_HEADS_MAX";
	if (l->kind == XFER_KV_MLA && (l->kv_heads != 1 || l->fused))
		return "an MLA layout has kv_heads = 1 and fused = 0";
	if (l->fused > 1)
		return "fused must be 0 or 1";
	if (!l->tp_size || l->tp_size > XFER_KV_TP_MAX || l->tp_rank >= l->tp_size)
		return "tp_rank must be below tp_size, tp_size at most XFER_KV_TP_MAX";
	if (l->kind == XFER_KV_GQA) {
		if (l->tp_size <= l->kv_heads && l->kv_heads % l->tp_size)
			return "tp_size must divide kv_heads";
		if (l->tp_size > l->kv_heads && l->tp_size % l->kv_heads)
			return "kv_heads must divide tp_size when heads are replicated";
	}
	/* Every offset the plan can produce must fit in 64 bits. */
	uint64_t bytes = (uint64_t)l->page_tokens * l->head_dim;
	if (bytes > UINT32_MAX || (bytes *= l->dtype_bytes) > UINT32_MAX)
		return "a head's page is larger than 4 GiB";
	uint64_t total;
	if (__builtin_mul_overflow(bytes * 2 * l->kv_heads, (uint64_t)l->pages, &total) ||
	    __builtin_mul_overflow(total, (uint64_t)l->layers, &total) || total >> 62)
		return "the pool is too large";
	return NULL;
}

int xfer_kv_layout_check(const struct xfer_kv_layout *l)
{
	return xfer_kv_layout_why(l) ? -EINVAL : 0;
}

uint64_t xfer_kv_head_bytes(const struct xfer_kv_layout *l)
{
	return (uint64_t)l->page_tokens * l->head_dim * l->dtype_bytes;
}

uint32_t xfer_kv_local_heads(const struct xfer_kv_layout *l, uint32_t *first)
{
	if (l->kind == XFER_KV_MLA) {
		*first = 0;
		return 1;
	}
	if (l->tp_size <= l->kv_heads) {
		uint32_t per = l->kv_heads / l->tp_size;
		*first = l->tp_rank * per;
		return per;
	}
	*first = l->tp_rank / (l->tp_size / l->kv_heads);
	return 1;
}

/* K and V planes are separate unless fused; MLA has a single plane. */
static uint32_t planes(const struct xfer_kv_layout *l)
{
	return l->kind == XFER_KV_GQA && !l->fused ? 2 : 1;
}

static uint32_t components(const struct xfer_kv_layout *l)
{
	return l->kind == XFER_KV_GQA ? 2 : 1;
}

static uint64_t page_bytes(const struct xfer_kv_layout *l)
{
	uint32_t first, n = xfer_kv_local_heads(l, &first);
	uint64_t per_head = xfer_kv_head_bytes(l) * (l->kind == XFER_KV_GQA && l->fused ? 2 : 1);
	return per_head * n;
}

static uint64_t layer_bytes(const struct xfer_kv_layout *l)
{
	return page_bytes(l) * l->pages * planes(l);
}

uint64_t xfer_kv_layout_bytes(const struct xfer_kv_layout *l)
{
	return layer_bytes(l) * l->layers;
}

/* Offset within a layer of token 0 of (local head h, component c) in page 0. */
static uint64_t head_off(const struct xfer_kv_layout *l, uint32_t h, uint32_t c)
{
	uint64_t hb = xfer_kv_head_bytes(l);
	if (l->kind == XFER_KV_MLA)
		return 0;
	if (l->fused)
		return ((uint64_t)h * 2 + c) * hb;
	return (uint64_t)c * page_bytes(l) * l->pages + (uint64_t)h * hb;
}

uint64_t xfer_kv_offset(const struct xfer_kv_layout *l, uint32_t layer, uint32_t page, uint32_t head,
			uint32_t c)
{
	uint32_t first, n = xfer_kv_local_heads(l, &first);
	if (layer >= l->layers || page >= l->pages || head < first || head >= first + n ||
	    c >= components(l))
		return UINT64_MAX;
	return (uint64_t)layer * layer_bytes(l) + (uint64_t)page * page_bytes(l) +
	       head_off(l, head - first, c);
}

/* The source rank that writes `head` to destination rank `dst`: when several
 * source ranks hold a replicated head (or the MLA latent), destinations are
 * spread over them so that each is written exactly once. */
static uint32_t writer_of(const struct xfer_kv_layout *src, uint32_t head, uint32_t dst)
{
	uint32_t kv = src->kind == XFER_KV_MLA ? 1 : src->kv_heads;
	if (src->tp_size <= kv)
		return head / (kv / src->tp_size);
	uint32_t copies = src->tp_size / kv;
	return head * copies + dst % copies;
}

static int same_model(const struct xfer_kv_layout *a, const struct xfer_kv_layout *b)
{
	return a->kind == b->kind && a->layers == b->layers && a->page_tokens == b->page_tokens &&
	       a->kv_heads == b->kv_heads && a->head_dim == b->head_dim &&
	       a->dtype_bytes == b->dtype_bytes;
}

static int by_src(const void *x, const void *y)
{
	const struct xfer_kv_seg *a = x, *b = y;
	return a->src_off < b->src_off ? -1 : a->src_off > b->src_off;
}

int xfer_kv_plan(const struct xfer_kv_layout *src, const struct xfer_kv_layout *dst,
		 struct xfer_kv_plan *out)
{
	if (!out || xfer_kv_layout_check(src) || xfer_kv_layout_check(dst) || !same_model(src, dst))
		return -EINVAL;
	memset(out, 0, sizeof(*out) - sizeof(out->segs));
	out->src_layer_stride = layer_bytes(src);
	out->dst_layer_stride = layer_bytes(dst);
	out->src_page_stride = page_bytes(src);
	out->dst_page_stride = page_bytes(dst);
	/* The extra context is the same on every source rank: one writes it. */
	out->writes_ctx = dst->tp_rank % src->tp_size == src->tp_rank;

	uint32_t sfirst, dfirst;
	uint32_t sn = xfer_kv_local_heads(src, &sfirst), dn = xfer_kv_local_heads(dst, &dfirst);
	uint64_t hb = xfer_kv_head_bytes(src);
	uint32_t n = 0;
	for (uint32_t h = dfirst; h < dfirst + dn; h++) {
		if (h < sfirst || h >= sfirst + sn || writer_of(src, h, dst->tp_rank) != src->tp_rank)
			continue;
		for (uint32_t c = 0; c < components(src); c++)
			out->segs[n++] = (struct xfer_kv_seg){.src_off = head_off(src, h - sfirst, c),
							      .dst_off = head_off(dst, h - dfirst, c),
							      .len = hb};
	}
	qsort(out->segs, n, sizeof(out->segs[0]), by_src);
	/* Heads adjacent on both sides become one longer write. */
	uint32_t m = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct xfer_kv_seg *last = m ? &out->segs[m - 1] : NULL;
		if (last && last->src_off + last->len == out->segs[i].src_off &&
		    last->dst_off + last->len == out->segs[i].dst_off)
			last->len += out->segs[i].len;
		else
			out->segs[m++] = out->segs[i];
	}
	out->nsegs = m;
	return 0;
}

uint64_t xfer_kv_plan_count(const struct xfer_kv_plan *p, uint32_t layers, uint32_t npages)
{
	return (uint64_t)p->nsegs * layers * npages + (p->writes_ctx ? 1 : 0);
}
