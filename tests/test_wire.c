/* Address and descriptor formats: round trips, and every kind of damage
 * (truncation at each length, each single-bit flip, wrong magic or version,
 * out-of-range counts, trailing bytes) yields a typed error. */
#include <string.h>

#include "helpers.h"
#include "wire/wire.h"

static void addr_cases(void)
{
	struct wire_addr a = {.engine_id = 0x1122334455667788ull, .nnics = 2};
	strcpy(a.provider, "tcp;ofi_rxm");
	for (int n = 0; n < 2; n++) {
		a.nic[n].len = (uint16_t)(16 + n);
		t_fill(a.nic[n].bytes, a.nic[n].len, (uint64_t)n);
		a.nic[n].sink_base = 1000u + (uint64_t)n;
		a.nic[n].sink_key = 77u + (uint64_t)n;
	}
	uint8_t buf[1024];
	size_t need = 0;
	CHECK_RC(xi_wire_addr_encode(&a, buf, 3, &need), -ENOSPC);
	int len = xi_wire_addr_encode(&a, buf, sizeof(buf), NULL);
	CHECK(len > 0 && (size_t)len == need);
	struct wire_addr b;
	CHECK_OK(xi_wire_addr_decode(buf, (size_t)len, &b));
	CHECK(b.engine_id == a.engine_id && b.nnics == 2 && !strcmp(b.provider, a.provider));
	for (int n = 0; n < 2; n++)
		CHECK(b.nic[n].len == a.nic[n].len && !memcmp(b.nic[n].bytes, a.nic[n].bytes, a.nic[n].len) &&
		      b.nic[n].sink_base == a.nic[n].sink_base && b.nic[n].sink_key == a.nic[n].sink_key);
	for (int cut = 0; cut < len; cut++)
		CHECK(xi_wire_addr_decode(buf, (size_t)cut, &b) < 0);
	for (int bit = 0; bit < len * 8; bit++) {
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		int rc = xi_wire_addr_decode(buf, (size_t)len, &b);
		CHECK(rc == -XFER_EBADWIRE || rc == -XFER_EVERSION);
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	CHECK_OK(xi_wire_addr_decode(buf, (size_t)len, &b));
	uint8_t longer[1100];
	memcpy(longer, buf, (size_t)len);
	longer[len] = 0;
	CHECK(xi_wire_addr_decode(longer, (size_t)len + 1, &b) == -XFER_EBADWIRE);
	CHECK(xi_wire_addr_decode(buf, (size_t)1 << 40, &b) == -XFER_EBADWIRE);

	/* Encoders refuse what decoders would refuse. */
	struct wire_addr bad = a;
	bad.nnics = 5;
	CHECK_RC(xi_wire_addr_encode(&bad, buf, sizeof(buf), NULL), -EINVAL);
	bad = a;
	bad.nic[0].len = 0;
	CHECK_RC(xi_wire_addr_encode(&bad, buf, sizeof(buf), NULL), -EINVAL);
	bad = a;
	bad.provider[0] = 0;
	CHECK_RC(xi_wire_addr_encode(&bad, buf, sizeof(buf), NULL), -EINVAL);
}

/* Builds a descriptor byte by byte with a valid CRC, to reach the checks
 * behind it. */
static size_t forge_desc(uint8_t *b, uint16_t version, uint64_t id, uint64_t len, uint8_t nnics,
			 uint64_t base)
{
	size_t p = 0;
	memcpy(b, "XFRD", 4);
	p = 4;
	b[p++] = (uint8_t)version;
	b[p++] = (uint8_t)(version >> 8);
	for (int i = 0; i < 8; i++)
		b[p++] = (uint8_t)(id >> (8 * i));
	for (int i = 0; i < 8; i++)
		b[p++] = (uint8_t)(len >> (8 * i));
	b[p++] = nnics;
	for (unsigned n = 0; n < (nnics > 4 ? 4u : nnics); n++) {
		for (int i = 0; i < 8; i++)
			b[p++] = (uint8_t)(base >> (8 * i));
		for (int i = 0; i < 8; i++)
			b[p++] = (uint8_t)((uint64_t)n >> (8 * i));
	}
	b[p++] = 0; /* flags */
	for (int i = 0; i < 8; i++)
		b[p++] = (uint8_t)((uint64_t)7 >> (8 * i)); /* region id */
	uint32_t crc = xi_wire_crc32(b, p);
	for (int i = 0; i < 4; i++)
		b[p++] = (uint8_t)(crc >> (8 * i));
	return p;
}

static void desc_cases(void)
{
	struct wire_desc d = {.engine_id = 9, .len = 4096, .nnics = 1, .nic = {{0x7f0000001000ull, 55}}};
	uint8_t buf[256];
	int len = xi_wire_desc_encode(&d, buf, sizeof(buf), NULL);
	CHECK(len > 0);
	struct wire_desc o;
	CHECK_OK(xi_wire_desc_decode(buf, (size_t)len, &o));
	CHECK(o.engine_id == 9 && o.len == 4096 && o.nnics == 1 && o.nic[0].base == 0x7f0000001000ull &&
	      o.nic[0].key == 55);
	for (int cut = 0; cut < len; cut++)
		CHECK(xi_wire_desc_decode(buf, (size_t)cut, &o) == -XFER_EBADWIRE);
	for (int bit = 0; bit < len * 8; bit++) {
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		int rc = xi_wire_desc_decode(buf, (size_t)len, &o);
		CHECK(rc == -XFER_EBADWIRE || rc == -XFER_EVERSION);
		buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	uint8_t f[256];
	size_t n = forge_desc(f, WIRE_VERSION, 9, 100, 1, 0);
	CHECK_OK(xi_wire_desc_decode(f, n, &o));
	n = forge_desc(f, WIRE_VERSION + 1, 9, 100, 1, 0);
	CHECK_RC(xi_wire_desc_decode(f, n, &o), -XFER_EVERSION);
	n = forge_desc(f, WIRE_VERSION, 0, 100, 1, 0);
	CHECK_RC(xi_wire_desc_decode(f, n, &o), -XFER_EBADWIRE); /* engine id 0 */
	n = forge_desc(f, WIRE_VERSION, 9, 100, 0, 0);
	CHECK_RC(xi_wire_desc_decode(f, n, &o), -XFER_EBADWIRE); /* no NICs */
	n = forge_desc(f, WIRE_VERSION, 9, 100, 200, 0);
	CHECK_RC(xi_wire_desc_decode(f, n, &o), -XFER_EBADWIRE); /* too many NICs */
	n = forge_desc(f, WIRE_VERSION, 9, UINT64_MAX, 1, 2);
	CHECK_RC(xi_wire_desc_decode(f, n, &o), -XFER_EBADWIRE); /* base + len wraps */
}

int main(void)
{
	CHECK(xi_wire_crc32("123456789", 9) == 0xcbf43926u);
	addr_cases();
	desc_cases();
	printf("wire: ok\n");
	return 0;
}
