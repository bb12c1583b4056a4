/* MoE test support (moe_test.h). Built with -ffp-contract=off, like the
 * module's combine, so that the reference sums round the same way. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_test.h"

static uint64_t rnd(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint16_t mt_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float mt_f32(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint32_t mt_ntok(const struct xfer_moe_config *c, uint64_t seed, uint32_t round, uint32_t rank)
{
	uint64_t s = seed ^ ((uint64_t)round << 32) ^ ((uint64_t)rank << 16) ^ 0x7e57;
	switch (round % 4) {
	case 0:
		return c->max_tokens; /* the largest allowed count */
	case 1:
		return (round + rank) % 3 == 0 ? 0 : 1 + (uint32_t)(rnd(&s) % c->max_tokens);
	default:
		return 1 + (uint32_t)(rnd(&s) % c->max_tokens);
	}
}

void mt_gen(const struct xfer_moe_config *c, uint64_t seed, uint32_t round, uint32_t rank,
	    uint32_t n, struct mt_tokens *t)
{
	uint32_t K = c->topk, E = c->num_experts, H = c->hidden, W = c->world_size, L = E / W;
	uint64_t s = seed ^ ((uint64_t)round << 40) ^ ((uint64_t)rank << 20) ^ 0x5eed;
	memset(t, 0, sizeof(*t));
	t->n = n;
	size_t nx = (size_t)n * H * c->dispatch_bytes;
	t->x = malloc(nx ? nx : 1);
	t->scales = malloc(((size_t)n * (H / XFER_MOE_SCALE_BLOCK) + 1) * sizeof(float));
	t->idx = malloc(((size_t)n * K + 1) * sizeof(int32_t));
	t->weights = malloc(((size_t)n * K + 1) * sizeof(float));
	if (!t->x || !t->scales || !t->idx || !t->weights)
		abort();
	for (size_t i = 0; i < nx; i++)
		t->x[i] = (uint8_t)rnd(&s);
	if (c->dispatch_bytes == 2) /* keep bf16 values finite: clear the top exponent bit */
		for (size_t i = 1; i < nx; i += 2)
			t->x[i] &= 0xbf;
	for (size_t i = 0; i < (size_t)n * (H / XFER_MOE_SCALE_BLOCK); i++)
		t->scales[i] = (float)(rnd(&s) % 1000) / 7.0f;
	uint32_t shape = round % 5;
	for (uint32_t tok = 0; tok < n; tok++) {
		int32_t *slot = &t->idx[(size_t)tok * K];
		for (uint32_t k = 0; k < K; k++) {
			/* top-k gives distinct experts: draw again on a repeat, and
			 * leave the slot empty when no distinct one turns up */
			int32_t e = -1;
			for (int tries = 0; tries < 16; tries++) {
				int32_t cand;
				switch (shape) {
				case 1: /* skewed: most pairs on the first experts of ranks 0 and 1 */
					cand = rnd(&s) % 4 ? (int32_t)((rnd(&s) % (L < 3 ? L : 3) +
									(rnd(&s) % 2) * L) % E)
							   : (int32_t)(rnd(&s) % E);
					break;
				case 2: /* every slot of a token on the rank of its first */
					cand = k && slot[0] >= 0
						       ? (int32_t)((uint32_t)slot[0] / L * L + rnd(&s) % L)
						       : (int32_t)(rnd(&s) % E);
					break;
				case 3: /* empty slots; the last rank's experts never chosen */
					cand = rnd(&s) % 5 == 0 ? -1 : (int32_t)(rnd(&s) % (W > 1 ? E - L : E));
					break;
				default:
					cand = (int32_t)(rnd(&s) % E);
				}
				bool dup = false;
				for (uint32_t k2 = 0; k2 < k; k2++)
					dup |= cand >= 0 && slot[k2] == cand;
				if (!dup) {
					e = cand;
					break;
				}
			}
			slot[k] = e;
			t->weights[(size_t)tok * K + k] = (float)(rnd(&s) % 4096) / 4096.0f;
		}
	}
}

void mt_free(struct mt_tokens *t)
{
	free(t->x);
	free(t->scales);
	free(t->idx);
	free(t->weights);
	memset(t, 0, sizeof(*t));
}

void mt_expert(const struct xfer_moe_config *c, uint32_t expert, const uint8_t *row, uint16_t *out)
{
	float f = 1.0f + (float)expert / 16.0f;
	for (uint32_t h = 0; h < c->hidden; h++) {
		uint32_t v = c->dispatch_bytes == 2 ? row[2 * h] : row[h];
		float a = (float)((int32_t)v - 128) / 64.0f;
		float p = a * f;
		out[h] = mt_bf16(p);
	}
}

int mt_check_dispatch(const struct xfer_moe_config *c, uint32_t me, const struct mt_tokens *all,
		      const struct xfer_moe_expert_out *o)
{
	uint32_t K = c->topk, E = c->num_experts, H = c->hidden, W = c->world_size, L = E / W;
	uint32_t rowb = H * c->dispatch_bytes, G = H / XFER_MOE_SCALE_BLOCK;
	int bad = 0;
	uint32_t off = 0;
	for (uint32_t le = 0; le < L; le++) {
		uint32_t e = me * L + le, row = 0;
		uint32_t base = c->layout == XFER_MOE_PADDED ? le * c->expert_capacity : off;
		if (o->offsets && (uint32_t)o->offsets[le] != base) {
			if (bad++ < 5)
				fprintf(stderr, "rank %u expert %u: offset %d, want %u\n", me, e, o->offsets[le], base);
		}
		/* rows in (source rank, token, slot) order */
		for (uint32_t s = 0; s < W; s++)
			for (uint32_t t = 0; t < all[s].n; t++)
				for (uint32_t k = 0; k < K; k++) {
					if (all[s].idx[(size_t)t * K + k] != (int32_t)e)
						continue;
					uint64_t r = (uint64_t)base + row++;
					const uint8_t *want = all[s].x + (size_t)t * rowb;
					const uint8_t *got = (const uint8_t *)o->x + r * rowb;
					int wrong = memcmp(want, got, rowb) != 0;
					if (c->scales)
						wrong |= memcmp(all[s].scales + (size_t)t * G, o->scales + r * G,
								G * sizeof(float)) != 0;
					if (o->src_rank)
						wrong |= o->src_rank[r] != (int32_t)s;
					if (o->src_token)
						wrong |= o->src_token[r] != (int32_t)t;
					if (wrong && bad++ < 5)
						fprintf(stderr, "rank %u expert %u row %llu: not token %u of rank %u\n",
							me, e, (unsigned long long)r, t, s);
				}
		if ((uint32_t)o->counts[le] != row && bad++ < 5)
			fprintf(stderr, "rank %u expert %u: %d rows, want %u\n", me, e, o->counts[le], row);
		uint32_t a = c->expert_align ? c->expert_align : 1;
		off += (row + a - 1) / a * a;
	}
	return bad;
}

int mt_check_combine(const struct xfer_moe_config *c, const struct mt_tokens *mine,
		     const uint16_t *out)
{
	uint32_t K = c->topk, H = c->hidden, rowb = H * c->dispatch_bytes;
	uint16_t *y = malloc(H * sizeof(uint16_t));
	float *acc = malloc(H * sizeof(float));
	int bad = 0;
	for (uint32_t t = 0; t < mine->n; t++) {
		for (uint32_t h = 0; h < H; h++)
			acc[h] = 0.0f;
		for (uint32_t k = 0; k < K; k++) {
			int32_t e = mine->idx[(size_t)t * K + k];
			if (e < 0)
				continue;
			mt_expert(c, (uint32_t)e, mine->x + (size_t)t * rowb, y);
			float w = mine->weights[(size_t)t * K + k];
			for (uint32_t h = 0; h < H; h++) {
				float p = w * mt_f32(y[h]);
				acc[h] = acc[h] + p;
			}
		}
		for (uint32_t h = 0; h < H; h++)
			if (out[(size_t)t * H + h] != mt_bf16(acc[h])) {
				if (bad++ < 5)
					fprintf(stderr, "token %u channel %u: %04x, want %04x\n", t, h,
						out[(size_t)t * H + h], mt_bf16(acc[h]));
				break;
			}
	}
	free(y);
	free(acc);
	return bad;
}
