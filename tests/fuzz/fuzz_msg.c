/* libFuzzer target for the in-band messages every engine receives from its
 * peers (wire/msg.h): whatever decodes must re-encode to the same bytes,
 * the body and every notice range must lie inside the input, and nothing
 * may crash, read out of bounds or allocate. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/msg.h"
#include "xfer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *data, size_t size, uint32_t app_max)
{
	static uint8_t out[1 << 17];
	struct xi_msg m;
	int rc = xi_msg_decode(data, size, app_max, &m);
	if (rc) {
		if (rc != -XFER_EBADWIRE)
			abort();
		return;
	}
	if (size < XI_MSG_HDR || m.body != data + XI_MSG_HDR || m.len != size - XI_MSG_HDR || size > sizeof(out))
		abort();
	switch (m.magic) {
	case XI_MSG_APP:
	case XI_MSG_PING:
	case XI_MSG_PONG:
	case XI_MSG_BYE:
		/* A header and the body as it came: bounded, and none for probes. */
		if (m.magic == XI_MSG_APP ? m.len > app_max : m.len != 0)
			abort();
		xi_msg_put_hdr(out, m.magic, m.len, m.src_id);
		memcpy(out + XI_MSG_HDR, m.body, m.len);
		break;
	case XI_MSG_NOTICE: {
		const struct xi_notice *n = &m.notice;
		if ((uint64_t)n->nranges * XI_NOTICE_RANGE + XI_NOTICE_HDR != m.len)
			abort();
		if (n->nranges && (n->ranges < m.body || n->ranges + (size_t)n->nranges * XI_NOTICE_RANGE > data + size))
			abort();
		struct wire_cursor c;
		xi_notice_begin(&c, out, sizeof(out), m.src_id, n);
		for (uint32_t i = 0; i < n->nranges; i++) {
			uint64_t off, len;
			xi_notice_range(n, i, &off, &len);
			xi_notice_add(&c, off, len);
		}
		if (xi_notice_end(&c, n) != (int)size)
			abort();
		break;
	}
	default:
		abort(); /* the decoder took a message it does not know */
	}
	if (memcmp(out, data, size) != 0)
		abort();
}

/* Each input as received by engines with small and large receive buffers. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check(data, size, 64);
	check(data, size, 8192);
	check(data, size, 1u << 24);
	return 0;
}
