/* A small decoder-only transformer, computed for real on the CPU, standing in
 * for the prefill of one tensor-parallel rank: per layer a QKV projection,
 * causal grouped-query attention, an output projection and an MLP. Its K and
 * V (fp16) go straight into the rank's KV pages, head-major, as the KV module
 * expects. Sizes are parameters; the demo and the benchmark pick them. */
#ifndef PD_MODEL_H
#define PD_MODEL_H

#include <stdint.h>

#include "xfer_kv.h"

struct pd_model {
	uint32_t layers, d_model, q_heads, kv_heads, head_dim, ffn;
	float *w_qkv, *w_o, *w_up, *w_down; /* shared by all layers: only the work matters */
};

struct pd_run {
	const struct pd_model *m;
	uint32_t tokens;
	float *x, *qkv, *att, *o, *h; /* activations, tokens rows each */
};

int pd_model_init(struct pd_model *m, uint64_t seed);
void pd_model_free(struct pd_model *m);
/* Multiply-adds of one layer over `tokens` tokens (for reporting). */
double pd_layer_flops(const struct pd_model *m, uint32_t tokens);

/* Embeds a deterministic prompt of `tokens` tokens derived from `seed`. */
int pd_run_start(struct pd_run *r, const struct pd_model *m, uint32_t tokens, uint64_t seed);
void pd_run_free(struct pd_run *r);
/* Computes one layer in place and stores its K and V (fp16) for the rank's
 * heads into pages[] of the pool described by l (page_tokens tokens each). */
void pd_layer(struct pd_run *r, uint32_t layer, const struct xfer_kv_layout *l, void *kv,
	      const uint32_t *pages);
/* A token id from the last hidden state: the "first token" of the answer. */
uint32_t pd_first_token(const struct pd_run *r);

/* FNV-1a over the K and V blocks of one page of one layer, heads in order:
 * the same value on any rank layout that holds the same heads. */
uint64_t pd_page_sum(const struct xfer_kv_layout *l, const void *kv, uint32_t layer, uint32_t page);

#endif
