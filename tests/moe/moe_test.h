/* MoE test support: deterministic routings and tokens that every process can
 * regenerate for every rank, and the reference dispatch and combine computed
 * from them directly (no protocol involved). */
#ifndef XFER_MOE_TEST_H
#define XFER_MOE_TEST_H

#include <stdint.h>

#include "xfer_moe.h"

/* One rank's inputs for one round. */
struct mt_tokens {
	uint32_t n;
	uint8_t *x;      /* [n][H] elements of dispatch_bytes */
	float *scales;   /* [n][H/128] (fp8) */
	int32_t *idx;    /* [n][K] */
	float *weights;  /* [n][K] */
};

/* Routing shapes a round can take (mt_gen picks by round): uniform, skewed
 * onto a few experts (so that some get nothing and others overflow the
 * private slots), every slot of a token on one rank, and empty slots. */
void mt_gen(const struct xfer_moe_config *c, uint64_t seed, uint32_t round, uint32_t rank,
	    uint32_t n, struct mt_tokens *t);
void mt_free(struct mt_tokens *t);
/* Tokens of a round: max_tokens, 0, or something in between. */
uint32_t mt_ntok(const struct xfer_moe_config *c, uint64_t seed, uint32_t round, uint32_t rank);

/* The expert "computation" of the tests: bf16 outputs that depend on the
 * row's bytes and the (global) expert, so that a row sent back to the wrong
 * slot changes the sum. */
void mt_expert(const struct xfer_moe_config *c, uint32_t expert, const uint8_t *row, uint16_t *out);

/* Checks one receiver's dispatch output against all ranks' inputs; returns
 * the number of mismatches (printing the first few). */
int mt_check_dispatch(const struct xfer_moe_config *c, uint32_t me, const struct mt_tokens *all,
		      const struct xfer_moe_expert_out *o);
/* Checks one rank's combine output against the reference sum. */
int mt_check_combine(const struct xfer_moe_config *c, const struct mt_tokens *mine,
		     const uint16_t *out);

uint16_t mt_bf16(float f);
float mt_f32(uint16_t b);

#endif
