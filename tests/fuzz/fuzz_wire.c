/* libFuzzer target for the parsers of untrusted bytes: engine addresses,
 * region descriptors, and the raw RDMA backend's NIC address and handshake
 * datagram. Whatever parses must re-encode to the same bytes, and nothing
 * may crash, read out of bounds or allocate. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ibv/ibv_wire.h"
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
	struct ibv_wire_addr ia;
	if (xi_ibv_addr_decode(data, size, &ia) == 0) {
		xi_ibv_addr_encode(&ia, out);
		if (size != IBV_ADDR_BYTES || memcmp(out, data, size) != 0 || !ia.uid)
			abort();
	}
	struct ibv_hello h;
	if (xi_ibv_hello_decode(data, size, &h) == 0) {
		xi_ibv_hello_encode(&h, out);
		if (size != IBV_HELLO_BYTES || memcmp(out, data, size) != 0 || !h.epoch ||
		    h.qpn[0] > IBV_QPN_MAX || h.qpn[1] > IBV_QPN_MAX)
			abort();
	}
}
