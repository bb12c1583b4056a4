// Shared by the GPU tests and xfer-gpu-bench: the page permutations and the
// byte patterns they write and verify (one definition, so that a source and
// its target, or two rows, cannot drift apart). Kernels are static: several
// .cu files of one program include this.
#pragma once
#include <stdint.h>

#include <algorithm>
#include <vector>

// The benchmark's permutation of 0..n-1 (xorshift; the same in both processes).
static inline void perm_xs(std::vector<uint32_t> &v, uint32_t n, uint64_t seed)
{
	v.resize(n);
	for (uint32_t i = 0; i < n; i++)
		v[i] = i;
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (uint32_t i = n - 1; i > 0; i--) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		std::swap(v[i], v[x % (i + 1)]);
	}
}

// The tests' permutation of 0..n-1 (an LCG).
static inline std::vector<uint32_t> perm_lcg(uint32_t n, uint32_t seed)
{
	std::vector<uint32_t> v(n);
	for (uint32_t i = 0; i < n; i++)
		v[i] = i;
	uint64_t s = seed;
	for (uint32_t i = n - 1; i > 0; i--) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		std::swap(v[i], v[(s >> 33) % (i + 1)]);
	}
	return v;
}

// Word `word` of the source pattern `seed`.
__host__ __device__ static inline uint64_t pat(uint64_t word, uint64_t seed)
{
	return (word + 1) * 0x9E3779B97F4A7C15ull ^ seed;
}

// The host's check_pat: page dp[i] of dst (pw words a page) must hold page
// sp[i] of the pattern (NULL lists: page i itself); returns the words that
// do not.
static inline uint64_t host_check(const uint64_t *dst, const std::vector<uint32_t> *sp, const std::vector<uint32_t> *dp,
				  uint32_t n, uint64_t pw, uint64_t seed)
{
	uint64_t bad = 0;
	for (uint64_t page = 0; page < n; page++)
		for (uint64_t w = 0; w < pw; w++) {
			uint64_t s = sp ? (*sp)[page] : page, d = dp ? (*dp)[page] : page;
			bad += dst[d * pw + w] != pat(s * pw + w, seed);
		}
	return bad;
}

static __global__ void fill_pat(uint64_t *p, uint64_t words, uint64_t seed)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words; i += (uint64_t)gridDim.x * blockDim.x)
		p[i] = pat(i, seed);
}

// Page dp[i] of dst (pw words a page) must hold page sp[i] of the pattern;
// NULL lists: page i itself. Mismatching words are added to *bad.
static __global__ void check_pat(const uint64_t *dst, const uint32_t *sp, const uint32_t *dp, uint32_t n, uint64_t pw,
				 uint64_t seed, unsigned long long *bad)
{
	uint64_t total = (uint64_t)n * pw;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < total; i += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t page = i / pw, w = i % pw;
		uint64_t s = sp ? sp[page] : page, d = dp ? dp[page] : page;
		if (dst[d * pw + w] != pat(s * pw + w, seed))
			atomicAdd(bad, 1ull);
	}
}
