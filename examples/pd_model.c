#include "pd_model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float *randn(size_t n, float scale, uint64_t *s)
{
	float *p = malloc(n * sizeof(float));
	for (size_t i = 0; p && i < n; i++)
		p[i] = ((float)(mix(s) >> 40) / (float)(1u << 24) - 0.5f) * scale;
	return p;
}

int pd_model_init(struct pd_model *m, uint64_t seed)
{
	uint32_t qkv = (m->q_heads + 2 * m->kv_heads) * m->head_dim;
	float sd = 1.0f / sqrtf((float)m->d_model);
	m->w_qkv = randn((size_t)m->d_model * qkv, sd, &seed);
	m->w_o = randn((size_t)m->q_heads * m->head_dim * m->d_model, sd, &seed);
	m->w_up = randn((size_t)m->d_model * m->ffn, sd, &seed);
	m->w_down = randn((size_t)m->ffn * m->d_model, 1.0f / sqrtf((float)m->ffn), &seed);
	return m->w_qkv && m->w_o && m->w_up && m->w_down ? 0 : -ENOMEM;
}

void pd_model_free(struct pd_model *m)
{
	free(m->w_qkv);
	free(m->w_o);
	free(m->w_up);
	free(m->w_down);
}

double pd_layer_flops(const struct pd_model *m, uint32_t n)
{
	double qkv = (double)(m->q_heads + 2 * m->kv_heads) * m->head_dim;
	double lin = (double)m->d_model * qkv + (double)m->q_heads * m->head_dim * m->d_model +
		     2.0 * m->d_model * m->ffn;
	/* Causal attention: QK^T and PV over the lower triangle. */
	double att = (double)m->q_heads * m->head_dim * (double)n * (n + 1);
	return 2.0 * (lin * n + att);
}

int pd_run_start(struct pd_run *r, const struct pd_model *m, uint32_t n, uint64_t seed)
{
	size_t qkv = (size_t)(m->q_heads + 2 * m->kv_heads) * m->head_dim;
	*r = (struct pd_run){.m = m, .tokens = n};
	r->x = randn((size_t)n * m->d_model, 1.0f, &seed);
	r->qkv = malloc((size_t)n * qkv * sizeof(float));
	r->att = malloc((size_t)n * m->q_heads * m->head_dim * sizeof(float));
	r->o = malloc((size_t)n * m->d_model * sizeof(float));
	r->h = malloc((size_t)n * m->ffn * sizeof(float));
	if (!r->x || !r->qkv || !r->att || !r->o || !r->h) {
		pd_run_free(r);
		return -ENOMEM;
	}
	return 0;
}

void pd_run_free(struct pd_run *r)
{
	free(r->x);
	free(r->qkv);
	free(r->att);
	free(r->o);
	free(r->h);
}

/* c[n x k] = a[n x m] * b[m x k], row-major; the inner loop runs along a
 * row of b so that it vectorizes. */
static void gemm(const float *a, const float *b, float *c, size_t n, size_t m, size_t k)
{
	for (size_t i = 0; i < n; i++) {
		float *ci = c + i * k;
		memset(ci, 0, k * sizeof(float));
		for (size_t p = 0; p < m; p++) {
			float av = a[i * m + p];
			const float *bp = b + p * k;
			for (size_t j = 0; j < k; j++)
				ci[j] += av * bp[j];
		}
	}
}

static void attention(struct pd_run *r)
{
	const struct pd_model *m = r->m;
	size_t hd = m->head_dim, stride = (size_t)(m->q_heads + 2 * m->kv_heads) * hd;
	float *score = malloc(r->tokens * sizeof(float));
	if (!score)
		abort();
	float scale = 1.0f / sqrtf((float)hd);
	for (uint32_t h = 0; h < m->q_heads; h++) {
		uint32_t g = h / (m->q_heads / m->kv_heads);
		size_t qo = h * hd, ko = (m->q_heads + g) * hd, vo = (m->q_heads + m->kv_heads + g) * hd;
		for (uint32_t t = 0; t < r->tokens; t++) {
			const float *q = r->qkv + t * stride + qo;
			float mx = -1e30f, sum = 0;
			for (uint32_t u = 0; u <= t; u++) {
				const float *k = r->qkv + u * stride + ko;
				float s = 0;
				for (size_t d = 0; d < hd; d++)
					s += q[d] * k[d];
				score[u] = s * scale;
				mx = score[u] > mx ? score[u] : mx;
			}
			for (uint32_t u = 0; u <= t; u++)
				sum += score[u] = expf(score[u] - mx);
			float *out = r->att + ((size_t)t * m->q_heads + h) * hd;
			memset(out, 0, hd * sizeof(float));
			for (uint32_t u = 0; u <= t; u++) {
				const float *v = r->qkv + u * stride + vo;
				float p = score[u] / sum;
				for (size_t d = 0; d < hd; d++)
					out[d] += p * v[d];
			}
		}
	}
	free(score);
}

static uint16_t to_half(float f)
{
	/* Round-to-nearest fp16 without denormals: good enough for a cache. */
	uint32_t x;
	memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, man = x & 0x7fffffu;
	int32_t he = (int32_t)e - 127 + 15;
	if (he <= 0)
		return (uint16_t)sign;
	if (he >= 31)
		return (uint16_t)(sign | 0x7c00u);
	return (uint16_t)(sign | (uint32_t)he << 10 | (man + 0x1000u) >> 13);
}

static void store_kv(struct pd_run *r, uint32_t layer, const struct xfer_kv_layout *l, void *kv,
		     const uint32_t *pages)
{
	const struct pd_model *m = r->m;
	size_t hd = m->head_dim, stride = (size_t)(m->q_heads + 2 * m->kv_heads) * hd;
	uint32_t first, nh = xfer_kv_local_heads(l, &first);
	for (uint32_t t = 0; t < r->tokens; t++) {
		uint32_t page = pages[t / l->page_tokens], slot = t % l->page_tokens;
		for (uint32_t h = first; h < first + nh; h++)
			for (uint32_t c = 0; c < 2; c++) {
				/* This rank computes its own heads only: local head h - first. */
				const float *src = r->qkv + t * stride + (m->q_heads + c * m->kv_heads + h - first) * hd;
				uint16_t *dst = (uint16_t *)((uint8_t *)kv + xfer_kv_offset(l, layer, page, h, c)) +
						(size_t)slot * hd;
				for (size_t d = 0; d < hd; d++)
					dst[d] = to_half(src[d]);
			}
	}
}

void pd_layer(struct pd_run *r, uint32_t layer, const struct xfer_kv_layout *l, void *kv,
	      const uint32_t *pages)
{
	const struct pd_model *m = r->m;
	size_t n = r->tokens, d = m->d_model, qkv = (size_t)(m->q_heads + 2 * m->kv_heads) * m->head_dim;
	gemm(r->x, m->w_qkv, r->qkv, n, d, qkv);
	store_kv(r, layer, l, kv, pages);
	attention(r);
	gemm(r->att, m->w_o, r->o, n, (size_t)m->q_heads * m->head_dim, d);
	for (size_t i = 0; i < n * d; i++)
		r->o[i] += r->x[i];
	gemm(r->o, m->w_up, r->h, n, d, m->ffn);
	for (size_t i = 0; i < n * m->ffn; i++)
		r->h[i] = r->h[i] > 0 ? r->h[i] : 0;
	gemm(r->h, m->w_down, r->x, n, m->ffn, d);
	for (size_t i = 0; i < n * d; i++)
		r->x[i] = r->x[i] * 0.5f + r->o[i] * 0.5f;
}

uint32_t pd_first_token(const struct pd_run *r)
{
	const float *last = r->x + (size_t)(r->tokens - 1) * r->m->d_model;
	uint32_t best = 0;
	for (uint32_t i = 1; i < r->m->d_model; i++)
		if (last[i] > last[best])
			best = i;
	return best;
}

uint64_t pd_page_sum(const struct xfer_kv_layout *l, const void *kv, uint32_t layer, uint32_t page)
{
	uint32_t first, nh = xfer_kv_local_heads(l, &first);
	uint64_t h = 0xcbf29ce484222325ull, hb = xfer_kv_head_bytes(l);
	for (uint32_t head = first; head < first + nh; head++)
		for (uint32_t c = 0; c < 2; c++) {
			const uint8_t *p = (const uint8_t *)kv + xfer_kv_offset(l, layer, page, head, c);
			for (uint64_t b = 0; b < hb; b++) {
				h ^= p[b];
				h *= 0x100000001b3ull;
			}
		}
	return h;
}
