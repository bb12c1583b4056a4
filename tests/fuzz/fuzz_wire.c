/* libFuzzer target for the parsers of untrusted bytes: engine addresses and
 * region descriptors. Whatever parses must re-encode to the same bytes, and
 * nothing may crash, read out of bounds or allocate. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"
#include "xfer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *data, size_t size);

/* Random bytes rarely carry a valid CRC, which would keep the fuzzer at the
 * door; each input is also tried with its CRC fixed up, to reach the field
 * checks behind it. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t fixed[70000];
	check(data, size);
	if (size >= 4 && size <= sizeof(fixed)) {
		memcpy(fixed, data, size);
		uint32_t crc = xi_wire_crc32(fixed, size - 4);
		for (int i = 0; i < 4; i++)
			fixed[size - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
		check(fixed, size);
	}
	return 0;
}

static void check(const uint8_t *data, size_t size)
{
	uint8_t out[70000];
	struct wire_addr a;
	int rc = xi_wire_addr_decode(data, size, &a);
	if (rc == 0) {
		int len = xi_wire_addr_encode(&a, out, sizeof(out), NULL);
		if (len < 0 || (size_t)len != size || memcmp(out, data, size) != 0)
			abort();
	} else if (rc != -XFER_EBADWIRE && rc != -XFER_EVERSION) {
		abort();
	}
	struct wire_desc d;
	rc = xi_wire_desc_decode(data, size, &d);
	if (rc == 0) {
		int len = xi_wire_desc_encode(&d, out, sizeof(out), NULL);
		if (len < 0 || (size_t)len != size || memcmp(out, data, size) != 0)
			abort();
		for (unsigned n = 0; n < d.nnics; n++)
			if (d.nic[n].base > UINT64_MAX - d.len)
				abort();
	} else if (rc != -XFER_EBADWIRE && rc != -XFER_EVERSION) {
		abort();
	}
}
