/* xi_parse_bytes (util/sys.h), the byte counts of XFER_GPU_KERNEL_MAX and
 * XFER_TX_BYTES: plain numbers in each base, every suffix in both cases,
 * where *end stops, and saturation instead of a wrapped shift. */
#include <string.h>

#include "helpers.h"
#include "util/sys.h"

static uint64_t parse(const char *s, const char *rest)
{
	char *end;
	uint64_t v = xi_parse_bytes(s, &end);
	CHECK(strcmp(end, rest) == 0);
	return v;
}

int main(void)
{
	CHECK(parse("0", "") == 0);
	CHECK(parse("4096", "") == 4096);
	CHECK(parse("0x40", "") == 64);
	CHECK(parse("010", "") == 8);
	CHECK(parse("64K", "") == 64u << 10 && parse("64k", "") == 64u << 10);
	CHECK(parse("256M", "") == 256ull << 20 && parse("1m", "") == 1ull << 20);
	CHECK(parse("1G", "") == 1ull << 30 && parse("3g", "") == 3ull << 30);
	CHECK(parse("2KB", "B") == 2048); /* the suffix only; the caller judges the rest */
	CHECK(parse("12x", "x") == 12);
	CHECK(parse("abc", "abc") == 0);
	CHECK(parse("17179869184G", "") == UINT64_MAX); /* 2^34 G: past 64 bits */
	CHECK(parse("17179869183G", "") == 17179869183ull << 30);
	CHECK(parse("18446744073709551615", "") == UINT64_MAX);
	printf("xi_parse_bytes: bases, suffixes, the rest and saturation checked\n");
	return 0;
}
