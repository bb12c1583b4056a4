/* Encoding and bounded parsing of module messages (kv_wire.h). */
#include "kv_wire.h"

#include "wire/wire.h" /* xi_wire_crc32: the same CRC as addresses and descriptors */
#include "wire/wire_cursor.h"

#include <errno.h>
#include <string.h>

#define HDR_BYTES 8 /* magic, version, type, pad */
#define CRC_BYTES 4
#define LAYOUT_WORDS 10

static void put_layout(struct wire_cursor *c, const struct xfer_kv_layout *l)
{
	const uint32_t w[LAYOUT_WORDS] = {l->kind,     l->layers,      l->pages,
					  l->page_tokens, l->kv_heads, l->head_dim,
					  l->dtype_bytes, l->fused,    l->tp_size,
					  l->tp_rank};
	for (int i = 0; i < LAYOUT_WORDS; i++)
		wc_put_u(c, w[i], 4);
}

static void get_layout(struct wire_cursor *c, struct xfer_kv_layout *l)
{
	uint32_t w[LAYOUT_WORDS];
	for (int i = 0; i < LAYOUT_WORDS; i++)
		w[i] = (uint32_t)wc_get_u(c, 4);
	*l = (struct xfer_kv_layout){w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9]};
}

static void put_blob(struct wire_cursor *c, const uint8_t *p, uint16_t len)
{
	wc_put_u(c, len, 2);
	wc_put(c, p, len);
}

static const uint8_t *get_blob(struct wire_cursor *c, uint16_t *len, size_t max)
{
	*len = (uint16_t)wc_get_u(c, 2);
	if (*len > max) {
		c->bad = 1;
		return NULL;
	}
	return wc_take(c, *len);
}

size_t xi_kv_req_fixed_len(const struct kv_msg *m)
{
	return HDR_BYTES + 8 + 8 + 4 * 8 + 8 + 2 * 4 * LAYOUT_WORDS + 4 * 2 + m->addr_len + m->kv_desc_len +
	       m->ctx_desc_len + m->app_len + CRC_BYTES;
}

int xi_kv_msg_encode(const struct kv_msg *m, const uint32_t *pages, void *buf, size_t cap)
{
	struct wire_cursor c = {.w = buf, .cap = cap};
	wc_put_u(&c, KV_WIRE_MAGIC, 4);
	wc_put_u(&c, KV_WIRE_VERSION, 2);
	wc_put_u(&c, m->type, 1);
	wc_put_u(&c, 0, 1);
	wc_put_u(&c, m->dseq, 8);
	switch (m->type) {
	case KV_MSG_REQ:
		wc_put_u(&c, m->id, 8);
		wc_put_u(&c, m->imm, 4);
		wc_put_u(&c, m->expected, 4);
		wc_put_u(&c, m->tokens, 4);
		wc_put_u(&c, m->npages, 4);
		wc_put_u(&c, m->first, 4);
		wc_put_u(&c, m->count, 4);
		wc_put_u(&c, m->ctx_cap, 4);
		wc_put_u(&c, m->xfer_ms, 4);
		wc_put_u(&c, m->ctx_off, 8);
		put_layout(&c, &m->src);
		put_layout(&c, &m->dst);
		put_blob(&c, m->addr, m->addr_len);
		put_blob(&c, m->kv_desc, m->kv_desc_len);
		put_blob(&c, m->ctx_desc, m->ctx_desc_len);
		put_blob(&c, m->app, m->app_len);
		for (uint32_t i = 0; i < m->count; i++)
			wc_put_u(&c, pages[i], 4);
		break;
	case KV_MSG_CANCEL:
		wc_put_u(&c, m->id, 8);
		wc_put_u(&c, m->dst.tp_rank, 4);
		put_blob(&c, m->addr, m->addr_len);
		break;
	case KV_MSG_HELLO:
		put_blob(&c, m->addr, m->addr_len);
		break;
	case KV_MSG_FAIL:
		wc_put_u(&c, (uint32_t)m->err, 4);
		wc_put_u(&c, m->quiesced, 1);
		break;
	case KV_MSG_ACK:
	case KV_MSG_BYE:
		break;
	default:
		return -EINVAL;
	}
	if (c.bad)
		return -ENOSPC;
	wc_put_u(&c, xi_wire_crc32(buf, c.pos), 4);
	return c.bad ? -ENOSPC : (int)c.pos;
}

int xi_kv_msg_is_ours(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	return len >= HDR_BYTES && ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
				    (uint32_t)p[3] << 24) == KV_WIRE_MAGIC;
}

uint32_t xi_kv_page_at(const struct kv_msg *m, uint32_t i)
{
	const uint8_t *p = m->pages + (size_t)i * 4;
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int decode_req(struct wire_cursor *c, struct kv_msg *m)
{
	m->id = wc_get_u(c, 8);
	m->imm = (uint32_t)wc_get_u(c, 4);
	m->expected = (uint32_t)wc_get_u(c, 4);
	m->tokens = (uint32_t)wc_get_u(c, 4);
	m->npages = (uint32_t)wc_get_u(c, 4);
	m->first = (uint32_t)wc_get_u(c, 4);
	m->count = (uint32_t)wc_get_u(c, 4);
	m->ctx_cap = (uint32_t)wc_get_u(c, 4);
	m->xfer_ms = (uint32_t)wc_get_u(c, 4);
	m->ctx_off = wc_get_u(c, 8);
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
	m->pages = wc_take(c, (size_t)m->count * 4);
	return 0;
}

int xi_kv_msg_decode(const void *buf, size_t len, struct kv_msg *m)
{
	memset(m, 0, sizeof(*m));
	if (!buf || len < HDR_BYTES + 8 + CRC_BYTES || !xi_kv_msg_is_ours(buf, len))
		return -XFER_EBADWIRE;
	const uint8_t *p = buf;
	uint32_t crc = (uint32_t)p[len - 4] | (uint32_t)p[len - 3] << 8 | (uint32_t)p[len - 2] << 16 |
		       (uint32_t)p[len - 1] << 24;
	if (crc != xi_wire_crc32(p, len - CRC_BYTES))
		return -XFER_EBADWIRE;
	struct wire_cursor c = {.r = p, .cap = len - CRC_BYTES, .pos = 4};
	if (wc_get_u(&c, 2) != KV_WIRE_VERSION)
		return -XFER_EVERSION;
	m->type = (uint32_t)wc_get_u(&c, 1);
	(void)wc_get_u(&c, 1);
	m->dseq = wc_get_u(&c, 8);
	int ret = 0;
	switch (m->type) {
	case KV_MSG_REQ:
		return decode_req(&c, m);
	case KV_MSG_CANCEL:
		m->id = wc_get_u(&c, 8);
		m->dst.tp_rank = (uint32_t)wc_get_u(&c, 4);
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
		m->err = (int32_t)(uint32_t)wc_get_u(&c, 4);
		m->quiesced = (uint8_t)wc_get_u(&c, 1);
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
