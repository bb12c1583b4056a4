/* The same-host backend's pure parts: the key table (growth, backward-shift
 * deletion, never a retired key found), the bounds check at the edges, and
 * the codecs (round trips; every truncation, extension and unknown flag
 * refused). */
#include <string.h>

#include "helpers.h"
#include "backend/sm/sm_keys.h"
#include "backend/sm/sm_wire.h"

static void keys(void)
{
	enum { N = 20000 };
	static uint8_t mem[64];
	static uint64_t key[N];
	static bool live[N];
	struct sm_keys k;
	CHECK_OK(xi_sm_keys_init(&k));
	for (int i = 0; i < N; i++) {
		CHECK_OK(xi_sm_keys_add(&k, mem, (uint64_t)i + 1, true, &key[i]));
		CHECK(key[i] != 0);
		live[i] = true;
	}
	CHECK(k.count == N);
	uint64_t rs = 7;
	for (int round = 0; round < 3; round++) {
		for (int j = 0; j < N / 2; j++) {
			int i = (int)(t_rand(&rs) % N);
			if (live[i]) {
				xi_sm_keys_remove(&k, key[i]);
				live[i] = false;
			}
		}
		for (int i = 0; i < N; i++) {
			const struct sm_reg *r = xi_sm_keys_find(&k, key[i]);
			if (live[i])
				CHECK(r && r->len == (uint64_t)i + 1 && r->key == key[i]);
			else
				CHECK(!r);
		}
		for (int i = 0; i < N; i++)
			if (!live[i] && t_rand(&rs) % 2) {
				CHECK_OK(xi_sm_keys_add(&k, mem, (uint64_t)i + 1, true, &key[i]));
				live[i] = true;
			}
	}
	size_t n = 0;
	for (int i = 0; i < N; i++)
		n += live[i];
	CHECK(k.count == n);
	CHECK(!xi_sm_keys_find(&k, 0));
	xi_sm_keys_remove(&k, 0); /* nothing */
	xi_sm_keys_free(&k);
}

static void bounds(void)
{
	static uint8_t mem[100];
	struct sm_reg r = {.key = 1, .base = mem, .len = 100, .remote_write = true};
	CHECK(xi_sm_reg_range(&r, 0, 100) == mem);
	CHECK(xi_sm_reg_range(&r, 100, 0) == mem + 100);
	CHECK(xi_sm_reg_range(&r, 99, 1) == mem + 99);
	CHECK(!xi_sm_reg_range(&r, 99, 2));
	CHECK(!xi_sm_reg_range(&r, 101, 0));
	CHECK(!xi_sm_reg_range(&r, 1, UINT64_MAX));
	CHECK(!xi_sm_reg_range(&r, UINT64_MAX, 2));
	CHECK(!xi_sm_reg_range(NULL, 0, 0));
	r.remote_write = false;
	CHECK(!xi_sm_reg_range(&r, 0, 1));
}

/* Every prefix and a one-byte extension of a valid message is refused. */
static void damaged(const uint8_t *msg, size_t len, int (*decode)(const void *, size_t, void *))
{
	uint8_t buf[128];
	memcpy(buf, msg, len);
	for (size_t cut = 0; cut < len; cut++)
		CHECK(decode(buf, cut, buf + 64) < 0);
	buf[len] = 0;
	CHECK(decode(buf, len + 1, buf + 64) < 0);
}

static int dec_addr(const void *b, size_t l, void *o)
{
	return xi_sm_addr_decode(b, l, o);
}
static int dec_hello(const void *b, size_t l, void *o)
{
	return xi_sm_hello_decode(b, l, o);
}
static int dec_ack(const void *b, size_t l, void *o)
{
	return xi_sm_ack_decode(b, l, o);
}

static void codecs(void)
{
	uint8_t buf[64];
	struct sm_addr a, a2;
	for (int i = 0; i < SM_NAME_BYTES; i++)
		a.name[i] = (uint8_t)(i * 37);
	CHECK(xi_sm_addr_encode(&a, buf, sizeof(buf)) == SM_ADDR_BYTES);
	CHECK_OK(xi_sm_addr_decode(buf, SM_ADDR_BYTES, &a2));
	CHECK(!memcmp(&a, &a2, sizeof(a)));
	damaged(buf, SM_ADDR_BYTES, dec_addr);
	CHECK(xi_sm_addr_encode(&a, buf, SM_ADDR_BYTES - 1) == -ENOSPC);
	char name[SM_SOCK_NAME_LEN + 1];
	xi_sm_sock_name(&a, name);
	CHECK(strlen(name) == SM_SOCK_NAME_LEN && !strncmp(name, "xfer-sm-0025", 12));

	struct sm_hello h = {.flags = SM_HELLO_NO_CMA, .slots = SM_SLOTS, .inline_bytes = SM_INLINE,
			     .seg_bytes = SM_SEG_BYTES, .probe_addr = 0x7f0012340000ull, .nonce = 42}, h2;
	CHECK(xi_sm_hello_encode(&h, buf, sizeof(buf)) == SM_HELLO_BYTES);
	CHECK_OK(xi_sm_hello_decode(buf, SM_HELLO_BYTES, &h2));
	CHECK(h2.flags == h.flags && h2.probe_addr == h.probe_addr && h2.nonce == 42);
	damaged(buf, SM_HELLO_BYTES, dec_hello);
	buf[6] = 0x80; /* an unknown flag */
	CHECK(xi_sm_hello_decode(buf, SM_HELLO_BYTES, &h2) == -XFER_EBADWIRE);
	h.slots = SM_SLOTS * 2; /* another layout */
	xi_sm_hello_encode(&h, buf, sizeof(buf));
	CHECK(xi_sm_hello_decode(buf, SM_HELLO_BYTES, &h2) == -XFER_EBADWIRE);
	h.slots = SM_SLOTS;
	xi_sm_hello_encode(&h, buf, sizeof(buf));
	buf[4] = 2; /* version */
	CHECK(xi_sm_hello_decode(buf, SM_HELLO_BYTES, &h2) == -XFER_EVERSION);

	struct sm_ack k = {.flags = SM_ACK_CMA, .status = -EACCES}, k2;
	CHECK(xi_sm_ack_encode(&k, buf, sizeof(buf)) == SM_ACK_BYTES);
	CHECK_OK(xi_sm_ack_decode(buf, SM_ACK_BYTES, &k2));
	CHECK(k2.flags == SM_ACK_CMA && k2.status == -EACCES);
	damaged(buf, SM_ACK_BYTES, dec_ack);
	k.status = 5; /* not an errno */
	xi_sm_ack_encode(&k, buf, sizeof(buf));
	CHECK(xi_sm_ack_decode(buf, SM_ACK_BYTES, &k2) == -XFER_EBADWIRE);

	CHECK(xi_sm_status_clean(0) == 0 && xi_sm_status_clean(-EACCES) == -EACCES);
	CHECK(xi_sm_status_clean(1) == -EIO && xi_sm_status_clean(-5000) == -EIO);
}

static void requests(void)
{
	struct sm_req r = {.op = SM_OP_WRITE, .flags = SM_F_INLINE | SM_F_IMM, .len = SM_INLINE};
	struct sm_req_view v;
	CHECK_OK(xi_sm_req_parse(&r, &v));
	r.len = SM_INLINE + 1;
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO);
	r = (struct sm_req){.op = SM_OP_WRITE, .len = 1 << 20, .src = UINT64_MAX - (1 << 19)};
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO); /* the source wraps */
	r = (struct sm_req){.op = SM_OP_SEND, .flags = SM_F_INLINE | SM_F_IMM, .len = 16};
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO); /* no immediate on a SEND */
	r = (struct sm_req){.op = 3, .flags = SM_F_INLINE};
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO);
	r = (struct sm_req){.op = SM_OP_WRITE, .flags = 0x80};
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO);
	/* Pieces: inline, non-empty, within their total, immediate on the last. */
	r = (struct sm_req){.op = SM_OP_WRITE, .flags = SM_F_INLINE | SM_F_CHUNK | SM_F_FIRST, .len = 4096,
			    .total = 8192};
	CHECK_OK(xi_sm_req_parse(&r, &v));
	r.flags |= SM_F_IMM;
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO);
	r.flags = SM_F_INLINE | SM_F_CHUNK | SM_F_LAST | SM_F_IMM;
	CHECK_OK(xi_sm_req_parse(&r, &v));
	r.flags = SM_F_CHUNK | SM_F_LAST;
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO);
	r.flags = SM_F_INLINE | SM_F_CHUNK | SM_F_FIRST | SM_F_LAST; /* one piece must be the whole */
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO);
	r.flags = SM_F_INLINE | SM_F_FIRST; /* FIRST without CHUNK */
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO);
	r = (struct sm_req){.op = SM_OP_WRITE, .flags = SM_F_INLINE | SM_F_CHUNK, .len = 0, .total = 0};
	CHECK(xi_sm_req_parse(&r, &v) == -EPROTO);
}

int main(void)
{
	keys();
	bounds();
	codecs();
	requests();
	printf("sm units: keys, bounds, codecs, requests\n");
	return 0;
}
