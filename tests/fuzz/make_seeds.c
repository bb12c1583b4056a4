/* Writes valid addresses and descriptors as the fuzzer's starting corpus. */
#include <stdio.h>
#include <string.h>

#include "wire/wire.h"

static void save(const char *name, const void *b, int len)
{
	char path[256];
	snprintf(path, sizeof(path), "%s", name);
	FILE *f = fopen(path, "wb");
	fwrite(b, 1, (size_t)len, f);
	fclose(f);
}

int main(void)
{
	uint8_t buf[4096];
	for (int nn = 1; nn <= 4; nn++) {
		struct wire_addr a = {.engine_id = 0x0123456789abcdefull + (unsigned)nn, .nnics = (uint8_t)nn,
				      .msg_max = 8192};
		strcpy(a.provider, nn == 1 ? "shm" : "tcp;ofi_rxm");
		for (int i = 0; i < nn; i++) {
			a.nic[i].len = (uint16_t)(16 + 8 * i);
			memset(a.nic[i].bytes, 0x10 + i, a.nic[i].len);
			a.nic[i].sink_base = 0x7f0000000000ull + (unsigned)i;
			a.nic[i].sink_key = 42u + (unsigned)i;
		}
		char name[64];
		snprintf(name, sizeof(name), "addr-%dnic", nn);
		save(name, buf, xi_wire_addr_encode(&a, buf, sizeof(buf), NULL));
		struct wire_desc d = {.engine_id = 99, .len = 1ull << 30, .nnics = (uint8_t)nn,
				      .region_id = (uint64_t)nn};
		if (nn == 2) {
			d.flags = WIRE_DESC_STAGED | WIRE_DESC_IPC;
			d.host_id = 0x1234;
			memset(d.ipc, 0xab, sizeof(d.ipc));
			d.ipc_offset = 4096;
		}
		for (int i = 0; i < nn; i++) {
			d.nic[i].base = i ? 0x7f0000001000ull : 0;
			d.nic[i].key = 7u + (unsigned)i;
		}
		snprintf(name, sizeof(name), "desc-%dnic", nn);
		save(name, buf, xi_wire_desc_encode(&d, buf, sizeof(buf), NULL));
	}
	return 0;
}
