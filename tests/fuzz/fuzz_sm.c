/* libFuzzer target for what the same-host backend reads from peers: the
 * NIC address, the connection hello and ack (socket messages), a request
 * and a completion status copied out of shared memory, and the bounds
 * check every request passes. Whatever decodes must re-encode to the same
 * bytes; whatever parses must satisfy the invariants the target relies on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sm/sm_keys.h"
#include "backend/sm/sm_wire.h"
#include "xfer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(int rc, int len, const uint8_t *data, size_t size, const uint8_t *out)
{
	if (rc == 0) {
		if (len < 0 || (size_t)len != size || memcmp(out, data, size) != 0)
			abort();
	} else if (rc != -XFER_EBADWIRE && rc != -XFER_EVERSION) {
		abort();
	}
}

static void check_req(const uint8_t *data, size_t size)
{
	struct sm_req raw;
	memset(&raw, 0, sizeof(raw));
	memcpy(&raw, data, size < sizeof(raw) ? size : sizeof(raw));
	struct sm_req_view v;
	if (xi_sm_req_parse(&raw, &v))
		return;
	if (v.op != SM_OP_WRITE && v.op != SM_OP_SEND)
		abort();
	if (v.flags & ~SM_F_KNOWN)
		abort();
	if (v.op == SM_OP_SEND && (v.flags & SM_F_IMM))
		abort();
	if ((v.flags & SM_F_INLINE) && v.len > SM_INLINE)
		abort();
	if (!(v.flags & SM_F_INLINE) && v.src > UINT64_MAX - v.len)
		abort();
	if ((v.flags & SM_F_CHUNK) && (!(v.flags & SM_F_INLINE) || !v.len || v.total < v.len))
		abort();
	if (!(v.flags & SM_F_CHUNK) && (v.flags & (SM_F_FIRST | SM_F_LAST)))
		abort();
	/* The bounds check: whatever it lets through lies inside the region. */
	static uint8_t region[8192]; /* as large as any r.len below: region + raddr stays a valid pointer */
	struct sm_reg r = {.key = 1, .base = region, .len = (v.total & 8191), .remote_write = true};
	uint8_t *dst = xi_sm_reg_range(&r, v.raddr, v.len);
	if (dst && (v.raddr > r.len || v.len > r.len - v.raddr || dst != region + v.raddr))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t out[64];
	struct sm_addr a;
	int rc = xi_sm_addr_decode(data, size, &a);
	roundtrip(rc, rc ? 0 : xi_sm_addr_encode(&a, out, sizeof(out)), data, size, out);
	struct sm_hello h;
	rc = xi_sm_hello_decode(data, size, &h);
	roundtrip(rc, rc ? 0 : xi_sm_hello_encode(&h, out, sizeof(out)), data, size, out);
	if (!rc && (h.slots != SM_SLOTS || h.inline_bytes != SM_INLINE || h.seg_bytes != SM_SEG_BYTES))
		abort();
	struct sm_ack k;
	rc = xi_sm_ack_decode(data, size, &k);
	roundtrip(rc, rc ? 0 : xi_sm_ack_encode(&k, out, sizeof(out)), data, size, out);
	if (!rc && (k.status > 0 || k.status < -4095))
		abort();
	check_req(data, size);
	if (size >= 4) {
		int32_t st;
		memcpy(&st, data, sizeof(st));
		int c = xi_sm_status_clean(st);
		if (c > 0 || c < -4095)
			abort();
	}
	return 0;
}
