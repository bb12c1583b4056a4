/* Writes valid addresses and descriptors (corpus/) and in-band messages
 * (corpus-msg/) as the fuzzers' starting corpora; run it in tests/fuzz:
 *   cc -Iinclude -Isrc tests/fuzz/make_seeds.c src/wire/wire.c src/wire/msg.c */
#include <stdio.h>
#include <string.h>

#include "wire/msg.h"
#include "wire/wire.h"

static void save(const char *name, const void *b, int len)
{
	char path[256];
	snprintf(path, sizeof(path), "%s", name);
	FILE *f = fopen(path, "wb");
	fwrite(b, 1, (size_t)len, f);
	fclose(f);
}

static void save_msgs(void)
{
	static const uint32_t probes[] = {XI_MSG_PING, XI_MSG_PONG, XI_MSG_BYE};
	static const char *names[] = {"ping", "pong", "bye"};
	uint8_t buf[4096];
	const uint64_t src = 0x0123456789abcdefull;
	for (int i = 0; i < 3; i++) {
		char name[64];
		snprintf(name, sizeof(name), "corpus-msg/%s", names[i]);
		xi_msg_put_hdr(buf, probes[i], 0, src);
		save(name, buf, XI_MSG_HDR);
	}
	xi_msg_put_hdr(buf, XI_MSG_APP, 5, src);
	memcpy(buf + XI_MSG_HDR, "hello", 5);
	save("corpus-msg/app", buf, XI_MSG_HDR + 5);
	/* Notices: a copy in place (count only), one range, a run of pages. */
	for (uint32_t nr = 0; nr <= 8; nr += nr ? 7 : 1) {
		struct xi_notice n = {.region_id = 42, .imm = 0x1234, .count = nr ? nr : 3, .nranges = nr};
		struct wire_cursor c;
		xi_notice_begin(&c, buf, sizeof(buf), src, &n);
		for (uint32_t i = 0; i < nr; i++)
			xi_notice_add(&c, 4096ull * i, 4096);
		char name[64];
		snprintf(name, sizeof(name), "corpus-msg/notice-%u", nr);
		save(name, buf, xi_notice_end(&c, &n));
	}
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
		snprintf(name, sizeof(name), "corpus/addr-%dnic", nn);
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
		snprintf(name, sizeof(name), "corpus/desc-%dnic", nn);
		save(name, buf, xi_wire_desc_encode(&d, buf, sizeof(buf), NULL));
	}
	save_msgs();
	return 0;
}
