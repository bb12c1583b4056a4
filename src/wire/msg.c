#include "wire/msg.h"

#include <errno.h>
#include <string.h>

#include "xfer.h"

void xi_msg_put_hdr(uint8_t *buf, uint32_t magic, uint32_t body_len, uint64_t src_id)
{
	struct wire_cursor c = {.w = buf, .cap = XI_MSG_HDR};
	wc_put_u(&c, magic, 4);
	wc_put_u(&c, body_len, 4);
	wc_put_u(&c, src_id, 8);
}

void xi_msg_get_hdr(const uint8_t *buf, struct xi_msg *out)
{
	struct wire_cursor c = {.r = buf, .cap = XI_MSG_HDR};
	memset(out, 0, sizeof(*out));
	out->magic = (uint32_t)wc_get_u(&c, 4);
	out->len = (uint32_t)wc_get_u(&c, 4);
	out->src_id = wc_get_u(&c, 8);
	out->body = buf + XI_MSG_HDR;
}

static int decode_notice(struct wire_cursor *c, uint32_t len, struct xi_notice *n)
{
	if (len < XI_NOTICE_HDR)
		return -XFER_EBADWIRE;
	n->region_id = wc_get_u(c, 8);
	n->imm = (uint32_t)wc_get_u(c, 4);
	n->count = (uint32_t)wc_get_u(c, 4);
	n->nranges = (uint32_t)wc_get_u(c, 4);
	uint32_t reserved = (uint32_t)wc_get_u(c, 4);
	/* Exactly the ranges announced, and nothing after them. */
	if (reserved || n->nranges > (len - XI_NOTICE_HDR) / XI_NOTICE_RANGE ||
	    XI_NOTICE_HDR + (uint64_t)n->nranges * XI_NOTICE_RANGE != len)
		return -XFER_EBADWIRE;
	n->ranges = wc_take(c, (size_t)n->nranges * XI_NOTICE_RANGE);
	return c->bad ? -XFER_EBADWIRE : 0;
}

int xi_msg_decode(const void *buf, size_t len, uint32_t app_max, struct xi_msg *out)
{
	struct wire_cursor c = {.r = buf, .cap = len};
	memset(out, 0, sizeof(*out));
	if (!buf || len < XI_MSG_HDR)
		return -XFER_EBADWIRE;
	out->magic = (uint32_t)wc_get_u(&c, 4);
	uint32_t body = (uint32_t)wc_get_u(&c, 4);
	out->src_id = wc_get_u(&c, 8);
	if ((size_t)body != len - XI_MSG_HDR)
		return -XFER_EBADWIRE;
	out->len = body;
	out->body = (const uint8_t *)buf + XI_MSG_HDR;
	switch (out->magic) {
	case XI_MSG_APP:
		return body <= app_max ? 0 : -XFER_EBADWIRE;
	case XI_MSG_PING:
	case XI_MSG_PONG:
	case XI_MSG_BYE:
		return body == 0 ? 0 : -XFER_EBADWIRE;
	case XI_MSG_NOTICE:
		return decode_notice(&c, body, &out->notice);
	default:
		return -XFER_EBADWIRE;
	}
}

void xi_notice_range(const struct xi_notice *n, uint32_t i, uint64_t *off, uint64_t *len)
{
	struct wire_cursor c = {.r = n->ranges + (size_t)i * XI_NOTICE_RANGE, .cap = XI_NOTICE_RANGE};
	*off = wc_get_u(&c, 8);
	*len = wc_get_u(&c, 8);
}

void xi_notice_begin(struct wire_cursor *c, uint8_t *buf, size_t cap, uint64_t src_id,
		     const struct xi_notice *n)
{
	uint64_t body = XI_NOTICE_HDR + (uint64_t)n->nranges * XI_NOTICE_RANGE;
	*c = (struct wire_cursor){.w = buf, .cap = cap};
	if (body > UINT32_MAX) {
		c->bad = 1;
		return;
	}
	wc_put_u(c, XI_MSG_NOTICE, 4);
	wc_put_u(c, body, 4);
	wc_put_u(c, src_id, 8);
	wc_put_u(c, n->region_id, 8);
	wc_put_u(c, n->imm, 4);
	wc_put_u(c, n->count, 4);
	wc_put_u(c, n->nranges, 4);
	wc_put_u(c, 0, 4);
}

void xi_notice_add(struct wire_cursor *c, uint64_t off, uint64_t len)
{
	wc_put_u(c, off, 8);
	wc_put_u(c, len, 8);
}

int xi_notice_end(struct wire_cursor *c, const struct xi_notice *n)
{
	size_t want = XI_MSG_HDR + XI_NOTICE_HDR + (size_t)n->nranges * XI_NOTICE_RANGE;
	if (c->bad || c->pos != want)
		return -ENOSPC;
	return (int)c->pos;
}

uint32_t xi_notice_ranges_max(uint32_t room)
{
	return room > XI_NOTICE_HDR + XI_NOTICE_RANGE ? (room - XI_NOTICE_HDR) / XI_NOTICE_RANGE : 1;
}
