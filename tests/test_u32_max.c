/* xi_u32_max (util/u32_max.h), the bound scan of every paged write's page
 * lists, against a plain loop: every length up to 80 (the vector body, its
 * tail, both), the maximum at each position, words with the top bit set
 * (an unsigned compare), and a 16,384-word list of random words. */
#include <string.h>

#include "helpers.h"
#include "util/u32_max.h"

static uint32_t plain(const uint32_t *v, uint32_t n)
{
	uint32_t m = 0;
	for (uint32_t i = 0; i < n; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

int main(void)
{
	static uint32_t v[16384];
	uint64_t s = 7;
	CHECK(xi_u32_max(v, 0) == 0);
	for (uint32_t n = 1; n <= 80; n++)
		for (uint32_t at = 0; at < n; at++) {
			for (uint32_t i = 0; i < n; i++)
				v[i] = (uint32_t)(t_rand(&s) % 1000u);
			v[at] = 0x80000000u + at; /* above every other, top bit set */
			CHECK(xi_u32_max(v, n) == 0x80000000u + at);
			v[at] = 1000u + at;
			CHECK(xi_u32_max(v, n) == 1000u + at);
		}
	for (uint32_t i = 0; i < 16384; i++)
		v[i] = (uint32_t)t_rand(&s);
	CHECK(xi_u32_max(v, 16384) == plain(v, 16384));
	memset(v, 0xff, sizeof(v));
	CHECK(xi_u32_max(v, 16384) == UINT32_MAX);
	printf("u32_max: lengths 0..80 and 16,384 agree with a plain loop\n");
	return 0;
}
