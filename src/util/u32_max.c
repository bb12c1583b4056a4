/* xi_u32_max (u32_max.h). Eight running maxima rather than one: a single
 * one chains every compare on the one before it (0.5 ns a word on the
 * 2-vCPU host: 8 us for a 16,384-page list, and run page7-1 on the H200
 * host took 30 us for a call's two lists), eight let the compiler make
 * them one vector where the CPU has AVX2 (0.6 us for 16,384 words on the
 * 2-vCPU host, against 4.1 us for the same loop without it). */
#include "util/u32_max.h"

#define MAX8(name, attr)                                                              \
	attr static uint32_t name(const uint32_t *v, uint32_t n)                      \
	{                                                                             \
		uint32_t m[8] = {0}, i = 0;                                           \
		for (; n - i >= 8; i += 8)                                            \
			for (unsigned k = 0; k < 8; k++)                              \
				m[k] = v[i + k] > m[k] ? v[i + k] : m[k];             \
		uint32_t top = 0;                                                     \
		for (unsigned k = 0; k < 8; k++)                                      \
			top = m[k] > top ? m[k] : top;                                \
		for (; i < n; i++)                                                    \
			top = v[i] > top ? v[i] : top;                                \
		return top;                                                           \
	}

MAX8(max8, )

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
MAX8(max8_avx2, __attribute__((target("avx2"))))
#endif

uint32_t xi_u32_max(const uint32_t *v, uint32_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
	if (__builtin_cpu_supports("avx2"))
		return max8_avx2(v, n);
#endif
	return max8(v, n);
}
