/* Module messages are untrusted bytes: every message survives a round trip,
 * and every truncation, bit flip, unknown version or inconsistent length is
 * refused without reading past the buffer. */
#include <string.h>

#include "kv_test.h"
#include "kv_wire.h"

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Re-seals a tampered message so that only the tampering is tested. */
static void reseal(uint8_t *buf, size_t len)
{
	uint32_t crc = 0xffffffffu;
	for (size_t i = 0; i < len - 4; i++) {
		crc ^= buf[i];
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
	}
	put32(buf + len - 4, ~crc);
}

static int req_len(struct kv_msg *m, uint32_t *pages, uint8_t *buf)
{
	static uint8_t addr[40], desc[52], ctxd[52], app[9];
	memset(addr, 1, sizeof(addr));
	memset(desc, 2, sizeof(desc));
	memset(ctxd, 3, sizeof(ctxd));
	memset(app, 4, sizeof(app));
	*m = (struct kv_msg){.type = KV_MSG_REQ, .dseq = 0x1234567890ull, .id = 77, .imm = 0x4b560001,
			     .expected = 99, .tokens = 37, .npages = 10, .first = 4, .count = 5,
			     .ctx_cap = 256, .ctx_off = 512, .xfer_ms = 1500,
			     .src = kvt_layout(XFER_KV_GQA, 8, 2, 1, 100, 1),
			     .dst = kvt_layout(XFER_KV_GQA, 8, 1, 0, 200, 0), .addr = addr,
			     .addr_len = sizeof(addr), .kv_desc = desc, .kv_desc_len = sizeof(desc),
			     .ctx_desc = ctxd, .ctx_desc_len = sizeof(ctxd), .app = app,
			     .app_len = sizeof(app)};
	for (uint32_t i = 0; i < 5; i++)
		pages[i] = 1000 + i * 3;
	int len = xi_kv_msg_encode(m, pages, buf, 8192);
	CHECK(len > 0 && (size_t)len == xi_kv_req_fixed_len(m) + 5 * 4);
	return len;
}

static void roundtrip(void)
{
	uint8_t buf[8192];
	uint32_t pages[5];
	struct kv_msg m, out;
	int len = req_len(&m, pages, buf);
	CHECK_OK(xi_kv_msg_decode(buf, (size_t)len, &out));
	CHECK(out.type == KV_MSG_REQ && out.dseq == m.dseq && out.id == 77 && out.imm == m.imm);
	CHECK(out.expected == 99 && out.tokens == 37 && out.npages == 10 && out.first == 4);
	CHECK(out.count == 5 && out.ctx_cap == 256 && out.ctx_off == 512 && out.xfer_ms == 1500);
	CHECK(!memcmp(&out.src, &m.src, sizeof(m.src)) && !memcmp(&out.dst, &m.dst, sizeof(m.dst)));
	CHECK(out.addr_len == 40 && out.addr[0] == 1 && out.kv_desc_len == 52 && out.kv_desc[51] == 2);
	CHECK(out.ctx_desc_len == 52 && out.app_len == 9 && out.app[8] == 4);
	for (uint32_t i = 0; i < 5; i++)
		CHECK(xi_kv_page_at(&out, i) == pages[i]);
	/* Too small a buffer is refused, never overrun. */
	CHECK_RC(xi_kv_msg_encode(&m, pages, buf, (size_t)len - 1), -ENOSPC);

	struct kv_msg small[] = {
		{.type = KV_MSG_CANCEL, .dseq = 5, .addr = buf, .addr_len = 12},
		{.type = KV_MSG_ACK, .dseq = 6},
		{.type = KV_MSG_FAIL, .dseq = 7, .err = -EPROTO, .quiesced = 1},
		{.type = KV_MSG_BYE},
	};
	for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
		uint8_t b[256];
		int n = xi_kv_msg_encode(&small[i], NULL, b, sizeof(b));
		CHECK(n > 0);
		CHECK_OK(xi_kv_msg_decode(b, (size_t)n, &out));
		CHECK(out.type == small[i].type && out.dseq == small[i].dseq);
		CHECK(out.err == small[i].err && out.quiesced == small[i].quiesced);
		CHECK(out.addr_len == small[i].addr_len);
		for (int cut = 0; cut < n; cut++)
			CHECK(xi_kv_msg_decode(b, (size_t)cut, &out) < 0);
	}
}

static void tampering(void)
{
	uint8_t buf[8192], t[8192];
	uint32_t pages[5];
	struct kv_msg m, out;
	int len = req_len(&m, pages, buf);
	/* Every truncation and every single bit flip. */
	for (int cut = 0; cut < len; cut++)
		CHECK(xi_kv_msg_decode(buf, (size_t)cut, &out) < 0);
	for (int i = 0; i < len; i++)
		for (int bit = 0; bit < 8; bit++) {
			memcpy(t, buf, (size_t)len);
			t[i] ^= (uint8_t)(1u << bit);
			CHECK(xi_kv_msg_decode(t, (size_t)len, &out) < 0);
		}
	/* A newer version is named as such. */
	memcpy(t, buf, (size_t)len);
	t[4] = KV_WIRE_VERSION + 1;
	reseal(t, (size_t)len);
	CHECK_RC(xi_kv_msg_decode(t, (size_t)len, &out), -XFER_EVERSION);
	/* Sealed but inconsistent: count past npages, more pages than bytes,
	 * an address longer than any, a FAIL that claims success. */
	size_t at_count = 8 + 8 + 8 + 4 * 5;
	memcpy(t, buf, (size_t)len);
	put32(t + at_count, 7); /* first 4 + count 7 > npages 10 */
	reseal(t, (size_t)len);
	CHECK_RC(xi_kv_msg_decode(t, (size_t)len, &out), -XFER_EBADWIRE);
	memcpy(t, buf, (size_t)len);
	put32(t + at_count - 8, 1 << 30); /* npages past the limit */
	reseal(t, (size_t)len);
	CHECK_RC(xi_kv_msg_decode(t, (size_t)len, &out), -XFER_EBADWIRE);
	memcpy(t, buf, (size_t)len);
	size_t at_addr = at_count + 4 * 3 + 8 + 80;
	t[at_addr] = 0xff, t[at_addr + 1] = 0xff;
	reseal(t, (size_t)len);
	CHECK_RC(xi_kv_msg_decode(t, (size_t)len, &out), -XFER_EBADWIRE);
	struct kv_msg f = {.type = KV_MSG_FAIL, .err = -1};
	int n = xi_kv_msg_encode(&f, NULL, t, sizeof(t));
	t[16] = 0; /* err = 0 */
	t[17] = t[18] = t[19] = 0;
	reseal(t, (size_t)n);
	CHECK_RC(xi_kv_msg_decode(t, (size_t)n, &out), -XFER_EBADWIRE);
	/* Not ours at all: the application's own messages pass through. */
	CHECK(!xi_kv_msg_is_ours("hello", 5));
	CHECK(xi_kv_msg_is_ours(buf, (size_t)len));
	/* Random garbage never parses. */
	uint64_t s = 1;
	for (int i = 0; i < 20000; i++) {
		size_t l = t_rand(&s) % 600;
		t_fill(t, l, t_rand(&s));
		if (l >= 4)
			put32(t, KV_WIRE_MAGIC);
		CHECK(xi_kv_msg_decode(t, l, &out) < 0);
	}
}

int main(void)
{
	roundtrip();
	tampering();
	return 0;
}
