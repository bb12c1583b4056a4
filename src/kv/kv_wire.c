/* Encoding and bounded parsing of module messages (kv_wire.h). */
#include "kv_wire.h"

#include "../wire.h" /* wire_crc32: the same CRC as addresses and descriptors */

#include <errno.h>
#include <string.h>

#define HDR_BYTES 8 /* magic, version, type, pad */
#define CRC_BYTES 4
#define LAYOUT_WORDS 10

/* A cursor that stops at its end: overruns set `bad` and do nothing else. */
struct cur {
	uint8_t *w;
	const uint8_t *r;
	size_t pos, cap;
	int bad;
};

static void put(struct cur *c, const void *src, size_t n)
{
	if (c->bad || n > c->cap - c->pos) {
		c->bad = 1;
		return;
	}
	if (n)
		memcpy(c->w + c->pos, src, n);
	c->pos += n;
}

static void put_u(struct cur *c, uint64_t v, size_t n)
{
	uint8_t b[8];
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(c, b, n);
}

static const uint8_t *take(struct cur *c, size_t n)
{
	if (c->bad || n > c->cap - c->pos) {
		c->bad = 1;
		return NULL;
	}
	const uint8_t *p = c->r + c->pos;
	c->pos += n;
	return p;
}

static uint64_t get_u(struct cur *c, size_t n)
{
	const uint8_t *p = take(c, n);
	uint64_t v = 0;
	for (size_t i = 0; p && i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void put_layout(struct cur *c, const struct xfer_kv_layout *l)
{
	const uint32_t w[LAYOUT_WORDS] = {l->kind,     l->layers,      l->pages,
					  l->page_tokens, l->kv_heads, l->head_dim,
					  l->dtype_bytes, l->fused,    l->tp_size,
					  l->tp_rank};
	for (int i = 0; i < LAYOUT_WORDS; i++)
		put_u(c, w[i], 4);
}

static void get_layout(struct cur *c, struct xfer_kv_layout *l)
{
	uint32_t w[LAYOUT_WORDS];
	for (int i = 0; i < LAYOUT_WORDS; i++)
		w[i] = (uint32_t)get_u(c, 4);
	*l = (struct xfer_kv_layout){w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9]};
}

static void put_blob(struct cur *c, const uint8_t *p, uint16_t len)
{
	put_u(c, len, 2);
	put(c, p, len);
}

static const uint8_t *get_blob(struct cur *c, uint16_t *len, size_t max)
{
	*len = (uint16_t)get_u(c, 2);
	if (*len > max) {
		c->bad = 1;
		return NULL;
	}
	return take(c, *len);
}

size_t kv_req_fixed_len(const struct kv_msg *m)
{
	return HDR_BYTES + 8 + 8 + 4 * 8 + 8 + 2 * 4 * LAYOUT_WORDS + 4 * 2 + m->addr_len + m->kv_desc_len +
	       m->ctx_desc_len + m->app_len + CRC_BYTES;
}

int kv_msg_encode(const struct kv_msg *m, const uint32_t *pages, void *buf, size_t cap)
{
	struct cur c = {.w = buf, .cap = cap};
	put_u(&c, KV_WIRE_MAGIC, 4);
	put_u(&c, KV_WIRE_VERSION, 2);
	put_u(&c, m->type, 1);
	put_u(&c, 0, 1);
	put_u(&c, m->dseq, 8);
	switch (m->type) {
	case KV_MSG_REQ:
		put_u(&c, m->id, 8);
		put_u(&c, m->imm, 4);
		put_u(&c, m->expected, 4);
		put_u(&c, m->tokens, 4);
		put_u(&c, m->npages, 4);
		put_u(&c, m->first, 4);
		put_u(&c, m->count, 4);
		put_u(&c, m->ctx_cap, 4);
		put_u(&c, m->xfer_ms, 4);
		put_u(&c, m->ctx_off, 8);
		put_layout(&c, &m->src);
		put_layout(&c, &m->dst);
		put_blob(&c, m->addr, m->addr_len);
		put_blob(&c, m->kv_desc, m->kv_desc_len);
		put_blob(&c, m->ctx_desc, m->ctx_desc_len);
		put_blob(&c, m->app, m->app_len);
		for (uint32_t i = 0; i < m->count; i++)
			put_u(&c, pages[i], 4);
		break;
	case KV_MSG_CANCEL:
		put_u(&c, m->id, 8);
		put_u(&c, m->dst.tp_rank, 4);
		put_blob(&c, m->addr, m->addr_len);
		break;
	case KV_MSG_HELLO:
		put_blob(&c, m->addr, m->addr_len);
		break;
	case KV_MSG_FAIL:
		put_u(&c, (uint32_t)m->err, 4);
		put_u(&c, m->quiesced, 1);
		break;
	case KV_MSG_ACK:
	case KV_MSG_BYE:
		break;
	default:
		return -EINVAL;
	}
	if (c.bad)
		return -ENOSPC;
	put_u(&c, wire_crc32(buf, c.pos), 4);
	return c.bad ? -ENOSPC : (int)c.pos;
}

int kv_msg_is_ours(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	return len >= HDR_BYTES && ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
				    (uint32_t)p[3] << 24) == KV_WIRE_MAGIC;
}

uint32_t kv_page_at(const struct kv_msg *m, uint32_t i)
{
	const uint8_t *p = m->pages + (size_t)i * 4;
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int decode_req(struct cur *c, struct kv_msg *m)
{
	m->id = get_u(c, 8);
	m->imm = (uint32_t)get_u(c, 4);
	m->expected = (uint32_t)get_u(c, 4);
	m->tokens = (uint32_t)get_u(c, 4);
	m->npages = (uint32_t)get_u(c, 4);
	m->first = (uint32_t)get_u(c, 4);
	m->count = (uint32_t)get_u(c, 4);
	m->ctx_cap = (uint32_t)get_u(c, 4);
	m->xfer_ms = (uint32_t)get_u(c, 4);
	m->ctx_off = get_u(c, 8);
	get_layout(c, &m->src);
	get_layout(c, &m->dst);
	m->addr = get_blob(c, &m->addr_len, XFER_ADDR_MAX);
	m->kv_desc = get_blob(c, &m->kv_desc_len, XFER_DESC_MAX);
	m->ctx_desc = get_blob(c, &m->ctx_desc_len, XFER_DESC_MAX);
	m->app = get_blob(c, &m->app_len, XFER_KV_APP_MAX);
	if (c->bad || !m->npages || m->npages > KV_NPAGES_MAX || m->first >= m->npages ||
	    m->count > m->npages - m->first || !m->addr_len || !m->kv_desc_len)
		return -XFER_EBADWIRE;
	if ((size_t)m->count * 4 != c->cap - c->pos)
		return -XFER_EBADWIRE;
	m->pages = take(c, (size_t)m->count * 4);
	return 0;
}

int kv_msg_decode(const void *buf, size_t len, struct kv_msg *m)
{
	memset(m, 0, sizeof(*m));
	if (!buf || len < HDR_BYTES + 8 + CRC_BYTES || !kv_msg_is_ours(buf, len))
		return -XFER_EBADWIRE;
	const uint8_t *p = buf;
	uint32_t crc = (uint32_t)p[len - 4] | (uint32_t)p[len - 3] << 8 | (uint32_t)p[len - 2] << 16 |
		       (uint32_t)p[len - 1] << 24;
	if (crc != wire_crc32(p, len - CRC_BYTES))
		return -XFER_EBADWIRE;
	struct cur c = {.r = p, .cap = len - CRC_BYTES, .pos = 4};
	if (get_u(&c, 2) != KV_WIRE_VERSION)
		return -XFER_EVERSION;
	m->type = (uint32_t)get_u(&c, 1);
	(void)get_u(&c, 1);
	m->dseq = get_u(&c, 8);
	int ret = 0;
	switch (m->type) {
	case KV_MSG_REQ:
		return decode_req(&c, m);
	case KV_MSG_CANCEL:
		m->id = get_u(&c, 8);
		m->dst.tp_rank = (uint32_t)get_u(&c, 4);
		m->addr = get_blob(&c, &m->addr_len, XFER_ADDR_MAX);
		if (m->dst.tp_rank >= XFER_KV_TP_MAX || !m->addr_len)
			ret = -XFER_EBADWIRE;
		break;
	case KV_MSG_HELLO:
		m->addr = get_blob(&c, &m->addr_len, XFER_ADDR_MAX);
		if (!m->addr_len)
			ret = -XFER_EBADWIRE;
		break;
	case KV_MSG_FAIL:
		m->err = (int32_t)(uint32_t)get_u(&c, 4);
		m->quiesced = (uint8_t)get_u(&c, 1);
		if (m->err >= 0 || m->quiesced > 1)
			ret = -XFER_EBADWIRE;
		break;
	case KV_MSG_ACK:
	case KV_MSG_BYE:
		break;
	default:
		return -XFER_EBADWIRE;
	}
	if (c.bad || c.pos != c.cap)
		return -XFER_EBADWIRE;
	return ret;
}
