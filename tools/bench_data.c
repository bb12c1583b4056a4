/* What the bytes are and where they go. The pattern is a pure function of
 * (seed, absolute offset), so the target can check any page without a copy
 * of the source, and a page that landed at the wrong place is caught. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

static inline uint64_t splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline uint8_t pattern_byte(uint64_t seed, uint64_t off)
{
	return (uint8_t)(splitmix(seed ^ (off >> 3) * 0x100000001b3ull) >> ((off & 7) * 8));
}

static inline uint64_t pattern_word(uint64_t seed, uint64_t off) /* off % 8 == 0 */
{
	return splitmix(seed ^ (off >> 3) * 0x100000001b3ull);
}

void pattern_fill(uint8_t *buf, uint64_t off, uint64_t len, uint64_t seed)
{
	uint64_t i = 0;
	for (; i < len && ((off + i) & 7); i++)
		buf[i] = pattern_byte(seed, off + i);
	for (; i + 8 <= len; i += 8) {
		uint64_t w = pattern_word(seed, off + i);
		memcpy(buf + i, &w, 8); /* little-endian hosts, like pattern_byte */
	}
	for (; i < len; i++)
		buf[i] = pattern_byte(seed, off + i);
}

int64_t pattern_check(const uint8_t *buf, uint64_t off, uint64_t len, uint64_t seed)
{
	uint64_t i = 0;
	for (; i < len && ((off + i) & 7); i++)
		if (buf[i] != pattern_byte(seed, off + i))
			return (int64_t)i;
	for (; i + 8 <= len; i += 8) {
		uint64_t w = pattern_word(seed, off + i), got;
		memcpy(&got, buf + i, 8);
		if (got != w)
			break; /* the byte loop below names the exact byte */
	}
	for (; i < len; i++)
		if (buf[i] != pattern_byte(seed, off + i))
			return (int64_t)i;
	return -1;
}

void *bench_alloc(size_t len)
{
	if (!len)
		len = 1;
	/* Populated up front: page faults belong to no implementation's figure. */
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		       -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void bench_free(void *p, size_t len)
{
	if (p)
		munmap(p, len ? len : 1);
}

static void permutation(uint32_t *p, uint32_t n, uint64_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		p[i] = i;
	for (uint32_t i = n; i-- > 1;) {
		seed = splitmix(seed);
		uint32_t j = (uint32_t)(seed % (i + 1)), t = p[i];
		p[i] = p[j];
		p[j] = t;
	}
}

int layout_make(const struct bench_case *c, struct layout *l)
{
	memset(l, 0, sizeof(*l));
	switch (c->op) {
	case OP_SINGLE: {
		/* Enough distinct slots that writes in flight do not share a
		 * destination, within BENCH_SLOT_CAP (perftest reuses one buffer). */
		uint64_t fit = c->bytes ? BENCH_SLOT_CAP / c->bytes : 1;
		l->nslots = c->window < fit ? c->window : (uint32_t)(fit ? fit : 1);
		l->src_len = l->dst_len = (uint64_t)l->nslots * c->bytes;
		return 0;
	}
	case OP_PAGED:
		l->nslots = 1;
		l->src_len = l->dst_len = (uint64_t)c->pages * c->bytes;
		l->sp = malloc((size_t)c->pages * sizeof(uint32_t));
		l->dp = malloc((size_t)c->pages * sizeof(uint32_t));
		if (!l->sp || !l->dp) {
			layout_free(l);
			return -ENOMEM;
		}
		/* Scattered on both sides, as KV-cache pages are. */
		permutation(l->sp, c->pages, c->seed ^ 0x5151);
		permutation(l->dp, c->pages, c->seed ^ 0xd0d0);
		return 0;
	default:
		l->nslots = 1;
		l->src_len = l->dst_len = c->bytes > 64 ? c->bytes : 64;
		return 0;
	}
}

void layout_free(struct layout *l)
{
	free(l->sp);
	free(l->dp);
	l->sp = l->dp = NULL;
}

uint64_t layout_slot_off(const struct bench_case *c, const struct layout *l, uint64_t seq)
{
	return (seq % l->nslots) * c->bytes;
}

int verify_dst(const struct bench_case *c, const struct layout *l, uint8_t *dst, uint64_t calls)
{
	uint64_t written = calls < l->nslots ? calls : l->nslots;
	/* Self-test of the checker (ctest bench_verify_catches): one byte
	 * flipped inside what was written must fail the run. */
	if (getenv("XFER_BENCH_CORRUPT") && calls && (c->op == OP_SINGLE || c->op == OP_PAGED))
		dst[(c->op == OP_SINGLE ? written * c->bytes : l->dst_len) / 2] ^= 0x5a;
	if (c->op == OP_SINGLE) {
		int64_t bad = pattern_check(dst, 0, written * c->bytes, c->seed);
		if (bad >= 0) {
			fprintf(stderr, "xfer-bench: verify: single %llu B: byte %lld of the target differs\n",
				(unsigned long long)c->bytes, (long long)bad);
			return -EILSEQ;
		}
	} else if (c->op == OP_PAGED && calls) {
		for (uint32_t i = 0; i < c->pages; i++) {
			int64_t bad = pattern_check(dst + (uint64_t)l->dp[i] * c->bytes,
						    (uint64_t)l->sp[i] * c->bytes, c->bytes, c->seed);
			if (bad >= 0) {
				fprintf(stderr, "xfer-bench: verify: paged: target page %u (source page %u) "
					"differs at byte %lld\n", l->dp[i], l->sp[i], (long long)bad);
				return -EILSEQ;
			}
		}
	}
	return 0;
}
