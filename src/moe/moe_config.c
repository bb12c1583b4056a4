/* MoE configuration: defaults, the rules a config must follow, and every
 * buffer size derived from it (docs/moe.md, "Buffer sizes"). */
#include <errno.h>
#include <string.h>

#include "moe.h"

void xfer_moe_config_init(struct xfer_moe_config *c)
{
	memset(c, 0, sizeof(*c));
	c->dispatch_bytes = 2;
	c->combine_bytes = 2;
	c->private_tokens = XFER_MOE_AUTO;
	c->overflow_tokens = XFER_MOE_AUTO;
	c->layout = XFER_MOE_PADDED;
	c->expert_capacity = XFER_MOE_AUTO;
	c->expert_align = XFER_MOE_AUTO;
	c->timeout_ms = 30000;
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

/* Saturating arithmetic: sizes are checked against a bound afterwards, so an
 * overflow must show up as "too big", never wrap into something small. */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	uint64_t r;
	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

void xfer_moe_config_resolve(struct xfer_moe_config *c)
{
	if (!c->world_size || !c->num_experts || c->num_experts % c->world_size)
		return; /* check() reports it */
	uint32_t T = c->max_tokens, W = c->world_size, L = c->num_experts / W;
	if (c->private_tokens == XFER_MOE_AUTO)
		c->private_tokens = min_u32(T, 256);
	if (c->overflow_tokens == XFER_MOE_AUTO) {
		uint32_t p = c->private_tokens <= T ? c->private_tokens : T;
		uint64_t o = mul_sat(W, T - p);
		c->overflow_tokens = o > INT32_MAX ? INT32_MAX : (uint32_t)o;
	}
	if (c->expert_align == XFER_MOE_AUTO)
		c->expert_align = 1;
	if (c->expert_capacity == XFER_MOE_AUTO) {
		uint64_t cap = c->layout == XFER_MOE_PACKED
				       ? add_sat(mul_sat(mul_sat(W, T), c->topk),
						 mul_sat(L, c->expert_align ? c->expert_align - 1 : 0))
				       : mul_sat(W, T);
		c->expert_capacity = cap > INT32_MAX ? INT32_MAX : (uint32_t)cap;
	}
}

/* Rows and records are indexed with int32 on the GPU; bytes of one buffer
 * stay below 2^40 (1 TiB), far above anything a GPU holds. */
#define MOE_BYTES_MAX (1ull << 40)

static const char *why(const struct xfer_moe_config *in)
{
	if (!in)
		return "no config";
	struct xfer_moe_config cc = *in, *c = &cc;
	xfer_moe_config_resolve(c);
	if (!c->world_size || c->world_size > XFER_MOE_RANKS_MAX)
		return "world_size must be 1..1024";
	if (c->rank >= c->world_size)
		return "rank must be below world_size";
	if (!c->num_experts || c->num_experts > XFER_MOE_EXPERTS_MAX)
		return "num_experts must be 1..1024";
	if (c->num_experts % c->world_size)
		return "num_experts must be a multiple of world_size";
	if (!c->topk || c->topk > XFER_MOE_TOPK_MAX)
		return "topk must be 1..32";
	if (!c->hidden || c->hidden % 16)
		return "hidden must be a positive multiple of 16";
	if (c->dispatch_bytes != 1 && c->dispatch_bytes != 2)
		return "dispatch_bytes must be 1 (fp8) or 2 (bf16)";
	if (c->scales > 1 || (c->scales && c->dispatch_bytes != 1))
		return "scales (1) go with fp8 payloads (dispatch_bytes 1) only";
	if (c->scales && c->hidden % XFER_MOE_SCALE_BLOCK)
		return "fp8 with scales needs hidden to be a multiple of 128";
	if (c->combine_bytes != 2)
		return "combine_bytes must be 2 (bf16)";
	if (!c->max_tokens || c->max_tokens > XFER_MOE_TOKENS_MAX)
		return "max_tokens must be 1..32768";
	if (c->private_tokens > c->max_tokens)
		return "private_tokens must be at most max_tokens";
	if (c->overflow_tokens > INT32_MAX)
		return "overflow_tokens must be below 2^31";
	if (c->layout != XFER_MOE_PADDED && c->layout != XFER_MOE_PACKED)
		return "layout must be padded (0) or packed (1)";
	if (!c->expert_capacity || c->expert_capacity > INT32_MAX)
		return "expert_capacity must be 1..2^31-1";
	if (!c->expert_align || c->expert_align > 4096 ||
	    (c->layout == XFER_MOE_PADDED && c->expert_align != 1))
		return "expert_align must be 1..4096, and 1 with the padded layout";
	uint64_t rows = c->layout == XFER_MOE_PADDED
				? mul_sat((uint64_t)c->num_experts / c->world_size, c->expert_capacity)
				: c->expert_capacity;
	if (rows > INT32_MAX)
		return "local experts x expert_capacity must stay below 2^31 rows";
	uint64_t rec = (uint64_t)MOE_ALIGN16(c->hidden * c->dispatch_bytes) +
		       (c->scales ? MOE_ALIGN16(c->hidden / XFER_MOE_SCALE_BLOCK * 4u) : 0) +
		       moe_meta_bytes(c->topk);
	uint64_t recv = add_sat(mul_sat(c->world_size, c->private_tokens), c->overflow_tokens);
	if (recv > INT32_MAX || mul_sat(recv, rec) > MOE_BYTES_MAX)
		return "world_size x private_tokens + overflow_tokens records exceed the limits (2^31 records, 1 TiB)";
	if (mul_sat(rows, (uint64_t)c->hidden * 2) > MOE_BYTES_MAX)
		return "the expert rows exceed 1 TiB";
	return NULL;
}

const char *xfer_moe_config_why(const struct xfer_moe_config *c)
{
	return why(c);
}

int xfer_moe_config_check(const struct xfer_moe_config *c)
{
	return why(c) ? -EINVAL : 0;
}

int xfer_moe_sizes(const struct xfer_moe_config *in, struct xfer_moe_sizes *s)
{
	if (!s || xfer_moe_config_check(in))
		return -EINVAL;
	struct xfer_moe_config cc = *in, *c = &cc;
	xfer_moe_config_resolve(c);
	memset(s, 0, sizeof(*s));
	uint32_t W = c->world_size, K = c->topk, T = c->max_tokens;
	s->local_experts = c->num_experts / W;
	s->payload_bytes = MOE_ALIGN16(c->hidden * c->dispatch_bytes);
	s->scale_bytes = c->scales ? MOE_ALIGN16(c->hidden / XFER_MOE_SCALE_BLOCK * 4u) : 0;
	s->meta_bytes = moe_meta_bytes(K);
	s->record_bytes = s->payload_bytes + s->scale_bytes + s->meta_bytes;
	s->combine_row_bytes = MOE_ALIGN16(c->hidden * c->combine_bytes);
	s->route_words = moe_route_words(c->num_experts, W);
	uint32_t me = moe_host(c->host_of, c->rank);
	for (uint32_t r = 0; r < W; r++)
		if (r != c->rank && moe_host(c->host_of, r) != me)
			s->remote_ranks++;
	s->send_records = (uint64_t)T * min_u32(K, W);
	s->recv_records = s->remote_ranks ? (uint64_t)W * c->private_tokens + c->overflow_tokens : 0;
	s->expert_rows = c->layout == XFER_MOE_PADDED ? (uint64_t)s->local_experts * c->expert_capacity
						      : c->expert_capacity;
	uint64_t from_remote = (uint64_t)s->remote_ranks * T * min_u32(K, s->local_experts);
	s->comb_send_rows = from_remote < s->expert_rows ? from_remote : s->expert_rows;
	s->comb_recv_rows = (uint64_t)T * K;
	s->send_bytes = s->send_records * s->record_bytes;
	s->recv_bytes = s->recv_records * s->record_bytes;
	s->comb_send_bytes = s->comb_send_rows * s->combine_row_bytes;
	s->comb_recv_bytes = s->comb_recv_rows * s->combine_row_bytes;
	s->route_vec_bytes = 2ull * s->route_words * 4;
	s->route_table_bytes = 2ull * W * s->route_words * 4;
	return 0;
}
