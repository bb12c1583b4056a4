/* Codecs of the same-host backend on the project's bounded cursor. Every
 * decoder requires the exact length, its magic and its version, and rejects
 * unknown flag bits, so that a message either means one thing or nothing. */
#include "backend/sm/sm_wire.h"

#include <errno.h>

#include "wire/wire_cursor.h"
#include "xfer.h"

#define ADDR_MAGIC 0x41534d58u  /* "XSMA" */
#define HELLO_MAGIC 0x48534d58u /* "XSMH" */
#define ACK_MAGIC 0x4b534d58u   /* "XSMK" */

static int finish_encode(const struct wire_cursor *c)
{
	return c->bad ? -ENOSPC : (int)c->pos;
}

/* Magic, version; then the caller reads the fields and finish_decode checks
 * that exactly the input was consumed. */
static int start_decode(struct wire_cursor *c, const void *buf, size_t len, size_t want,
			uint32_t magic)
{
	*c = (struct wire_cursor){.r = buf, .cap = len};
	if (!buf || len != want)
		return -XFER_EBADWIRE;
	if ((uint32_t)wc_get_u(c, 4) != magic)
		return -XFER_EBADWIRE;
	if (wc_get_u(c, 2) != SM_VERSION)
		return -XFER_EVERSION;
	return 0;
}

static int finish_decode(const struct wire_cursor *c)
{
	return c->bad || c->pos != c->cap ? -XFER_EBADWIRE : 0;
}

int xi_sm_addr_encode(const struct sm_addr *a, uint8_t *buf, size_t cap)
{
	struct wire_cursor c = {.w = buf, .cap = cap};
	wc_put_u(&c, ADDR_MAGIC, 4);
	wc_put_u(&c, SM_VERSION, 2);
	wc_put_u(&c, 0, 2);
	wc_put(&c, a->name, SM_NAME_BYTES);
	return finish_encode(&c);
}

int xi_sm_addr_decode(const void *buf, size_t len, struct sm_addr *out)
{
	struct wire_cursor c;
	int ret = start_decode(&c, buf, len, SM_ADDR_BYTES, ADDR_MAGIC);
	if (ret)
		return ret;
	if (wc_get_u(&c, 2) != 0)
		return -XFER_EBADWIRE;
	wc_get(&c, out->name, SM_NAME_BYTES);
	return finish_decode(&c);
}

int xi_sm_hello_encode(const struct sm_hello *h, uint8_t *buf, size_t cap)
{
	struct wire_cursor c = {.w = buf, .cap = cap};
	wc_put_u(&c, HELLO_MAGIC, 4);
	wc_put_u(&c, SM_VERSION, 2);
	wc_put_u(&c, h->flags, 2);
	wc_put_u(&c, h->slots, 4);
	wc_put_u(&c, h->inline_bytes, 4);
	wc_put_u(&c, h->seg_bytes, 8);
	wc_put_u(&c, h->probe_addr, 8);
	wc_put_u(&c, h->nonce, 8);
	return finish_encode(&c);
}

int xi_sm_hello_decode(const void *buf, size_t len, struct sm_hello *out)
{
	struct wire_cursor c;
	int ret = start_decode(&c, buf, len, SM_HELLO_BYTES, HELLO_MAGIC);
	if (ret)
		return ret;
	out->flags = (uint16_t)wc_get_u(&c, 2);
	out->slots = (uint32_t)wc_get_u(&c, 4);
	out->inline_bytes = (uint32_t)wc_get_u(&c, 4);
	out->seg_bytes = wc_get_u(&c, 8);
	out->probe_addr = wc_get_u(&c, 8);
	out->nonce = wc_get_u(&c, 8);
	if ((ret = finish_decode(&c)))
		return ret;
	/* One layout exists: the one this build was compiled with. */
	if (out->flags & ~SM_HELLO_KNOWN || out->slots != SM_SLOTS || out->inline_bytes != SM_INLINE ||
	    out->seg_bytes != SM_SEG_BYTES)
		return -XFER_EBADWIRE;
	return 0;
}

int xi_sm_ack_encode(const struct sm_ack *a, uint8_t *buf, size_t cap)
{
	struct wire_cursor c = {.w = buf, .cap = cap};
	wc_put_u(&c, ACK_MAGIC, 4);
	wc_put_u(&c, SM_VERSION, 2);
	wc_put_u(&c, a->flags, 2);
	wc_put_u(&c, (uint32_t)a->status, 4);
	return finish_encode(&c);
}

int xi_sm_ack_decode(const void *buf, size_t len, struct sm_ack *out)
{
	struct wire_cursor c;
	int ret = start_decode(&c, buf, len, SM_ACK_BYTES, ACK_MAGIC);
	if (ret)
		return ret;
	out->flags = (uint16_t)wc_get_u(&c, 2);
	out->status = (int32_t)(uint32_t)wc_get_u(&c, 4);
	if ((ret = finish_decode(&c)))
		return ret;
	if (out->flags & ~SM_ACK_KNOWN || out->status > 0 || out->status < -4095)
		return -XFER_EBADWIRE;
	return 0;
}

int xi_sm_req_parse(const struct sm_req *raw, struct sm_req_view *v)
{
	v->op = raw->op;
	v->flags = raw->flags;
	v->imm = raw->imm;
	v->len = raw->len;
	v->src = raw->src;
	v->raddr = raw->raddr;
	v->rkey = raw->rkey;
	v->total = raw->total;
	if (v->op != SM_OP_WRITE && v->op != SM_OP_SEND)
		return -EPROTO;
	if (v->flags & ~SM_F_KNOWN)
		return -EPROTO;
	/* A SEND has no immediate; its length is bounded by the receive buffer. */
	if (v->op == SM_OP_SEND && (v->flags & SM_F_IMM))
		return -EPROTO;
	if (v->flags & SM_F_INLINE) {
		if (v->len > SM_INLINE)
			return -EPROTO;
	} else if (v->flags & SM_F_CHUNK) {
		return -EPROTO; /* pieces are always inline */
	} else if (v->src > UINT64_MAX - v->len) {
		return -EPROTO; /* the source range would wrap */
	}
	if (v->flags & SM_F_CHUNK) {
		if (v->len == 0 || v->total < v->len)
			return -EPROTO;
		/* The immediate rides on the last piece only. */
		if ((v->flags & SM_F_IMM) && !(v->flags & SM_F_LAST))
			return -EPROTO;
		if ((v->flags & SM_F_FIRST) && (v->flags & SM_F_LAST) && v->total != v->len)
			return -EPROTO;
	} else if (v->flags & (SM_F_FIRST | SM_F_LAST)) {
		return -EPROTO;
	}
	return 0;
}

int xi_sm_status_clean(int32_t status)
{
	return status <= 0 && status >= -4095 ? status : -EIO;
}

void xi_sm_sock_name(const struct sm_addr *a, char out[SM_SOCK_NAME_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	memcpy(out, "xfer-sm-", 8);
	for (unsigned i = 0; i < SM_NAME_BYTES; i++) {
		out[8 + 2 * i] = hex[a->name[i] >> 4];
		out[9 + 2 * i] = hex[a->name[i] & 15];
	}
	out[SM_SOCK_NAME_LEN] = 0;
}
