#include "wire.h"

#include <errno.h>
#include <string.h>

#include "xfer.h"

static const uint8_t addr_magic[4] = {'X', 'F', 'R', 'A'};
static const uint8_t desc_magic[4] = {'X', 'F', 'R', 'D'};

uint32_t wire_crc32(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint32_t crc = 0xffffffffu;
	for (size_t i = 0; i < len; i++) {
		crc ^= p[i];
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
	}
	return ~crc;
}

/* A cursor that never reads or writes past its end; once it overruns, every
 * later access is a no-op and `bad` stays set. */
struct cursor {
	uint8_t *w;
	const uint8_t *r;
	size_t pos, cap;
	int bad;
};

static void put(struct cursor *c, const void *src, size_t n)
{
	if (c->bad || n > c->cap - c->pos) {
		c->bad = 1;
		c->pos += n;
		return;
	}
	if (c->w)
		memcpy(c->w + c->pos, src, n);
	c->pos += n;
}

static void put_u(struct cursor *c, uint64_t v, size_t n)
{
	uint8_t b[8];
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(c, b, n);
}

static void get(struct cursor *c, void *dst, size_t n)
{
	if (c->bad || n > c->cap - c->pos) {
		c->bad = 1;
		memset(dst, 0, n);
		return;
	}
	memcpy(dst, c->r + c->pos, n);
	c->pos += n;
}

static uint64_t get_u(struct cursor *c, size_t n)
{
	uint8_t b[8];
	uint64_t v = 0;
	get(c, b, n);
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)b[i] << (8 * i);
	return v;
}

static int finish_encode(struct cursor *c, size_t *need)
{
	uint32_t crc = c->bad || !c->w ? 0 : wire_crc32(c->w, c->pos);
	put_u(c, crc, 4);
	if (need)
		*need = c->pos;
	if (c->bad)
		return -ENOSPC;
	return (int)c->pos;
}

/* Checks magic, version and CRC; leaves the cursor after the version. */
static int start_decode(struct cursor *c, const void *buf, size_t len, const uint8_t magic[4])
{
	uint8_t m[4];
	if (!buf || len < 4 + 2 + 4)
		return -XFER_EBADWIRE;
	if (len > 64 * 1024)
		return -XFER_EBADWIRE;
	c->r = buf;
	c->cap = len - 4;
	get(c, m, 4);
	if (memcmp(m, magic, 4) != 0)
		return -XFER_EBADWIRE;
	if (get_u(c, 2) != WIRE_VERSION)
		return -XFER_EVERSION;
	const uint8_t *tail = (const uint8_t *)buf + len - 4;
	uint32_t crc = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 | (uint32_t)tail[2] << 16 |
		       (uint32_t)tail[3] << 24;
	if (crc != wire_crc32(buf, len - 4))
		return -XFER_EBADWIRE;
	return 0;
}

int wire_addr_encode(const struct wire_addr *a, void *buf, size_t cap, size_t *need)
{
	struct cursor c = {.w = buf, .cap = buf ? cap : 0};
	size_t plen = strnlen(a->provider, WIRE_PROV_MAX);
	if (a->nnics == 0 || a->nnics > XFER_NIC_MAX || plen == 0 || plen >= WIRE_PROV_MAX)
		return -EINVAL;
	put(&c, addr_magic, 4);
	put_u(&c, WIRE_VERSION, 2);
	put_u(&c, a->engine_id, 8);
	put_u(&c, plen, 1);
	put(&c, a->provider, plen);
	put_u(&c, a->msg_max, 4);
	put_u(&c, a->nnics, 1);
	for (unsigned i = 0; i < a->nnics; i++) {
		const struct wire_nic_addr *n = &a->nic[i];
		if (n->len == 0 || n->len > WIRE_NIC_ADDR_MAX)
			return -EINVAL;
		put_u(&c, n->len, 2);
		put(&c, n->bytes, n->len);
		put_u(&c, n->sink_base, 8);
		put_u(&c, n->sink_key, 8);
	}
	return finish_encode(&c, need);
}

int wire_addr_decode(const void *buf, size_t len, struct wire_addr *out)
{
	struct cursor c = {0};
	int rc = start_decode(&c, buf, len, addr_magic);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	out->engine_id = get_u(&c, 8);
	size_t plen = get_u(&c, 1);
	if (plen == 0 || plen >= WIRE_PROV_MAX)
		return -XFER_EBADWIRE;
	get(&c, out->provider, plen);
	if (memchr(out->provider, 0, plen))
		return -XFER_EBADWIRE;
	out->msg_max = (uint32_t)get_u(&c, 4);
	out->nnics = (uint8_t)get_u(&c, 1);
	if (out->nnics == 0 || out->nnics > XFER_NIC_MAX)
		return -XFER_EBADWIRE;
	for (unsigned i = 0; i < out->nnics; i++) {
		struct wire_nic_addr *n = &out->nic[i];
		n->len = (uint16_t)get_u(&c, 2);
		if (n->len == 0 || n->len > WIRE_NIC_ADDR_MAX)
			return -XFER_EBADWIRE;
		get(&c, n->bytes, n->len);
		n->sink_base = get_u(&c, 8);
		n->sink_key = get_u(&c, 8);
	}
	if (c.bad || c.pos != c.cap || out->engine_id == 0)
		return -XFER_EBADWIRE;
	return 0;
}

int wire_desc_encode(const struct wire_desc *d, void *buf, size_t cap, size_t *need)
{
	struct cursor c = {.w = buf, .cap = buf ? cap : 0};
	if (d->nnics == 0 || d->nnics > XFER_NIC_MAX)
		return -EINVAL;
	put(&c, desc_magic, 4);
	put_u(&c, WIRE_VERSION, 2);
	put_u(&c, d->engine_id, 8);
	put_u(&c, d->len, 8);
	put_u(&c, d->nnics, 1);
	for (unsigned i = 0; i < d->nnics; i++) {
		put_u(&c, d->nic[i].base, 8);
		put_u(&c, d->nic[i].key, 8);
	}
	if (d->flags & ~WIRE_DESC_FLAGS)
		return -EINVAL;
	put_u(&c, d->flags, 1);
	put_u(&c, d->region_id, 8);
	if (d->flags & WIRE_DESC_IPC) {
		put_u(&c, d->host_id, 8);
		put(&c, d->ipc, sizeof(d->ipc));
		put_u(&c, d->ipc_offset, 8);
	}
	return finish_encode(&c, need);
}

int wire_desc_decode(const void *buf, size_t len, struct wire_desc *out)
{
	struct cursor c = {0};
	int rc = start_decode(&c, buf, len, desc_magic);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	out->engine_id = get_u(&c, 8);
	out->len = get_u(&c, 8);
	out->nnics = (uint8_t)get_u(&c, 1);
	if (out->nnics == 0 || out->nnics > XFER_NIC_MAX)
		return -XFER_EBADWIRE;
	for (unsigned i = 0; i < out->nnics; i++) {
		out->nic[i].base = get_u(&c, 8);
		out->nic[i].key = get_u(&c, 8);
	}
	out->flags = (uint8_t)get_u(&c, 1);
	if (out->flags & ~WIRE_DESC_FLAGS)
		return -XFER_EBADWIRE;
	out->region_id = get_u(&c, 8);
	if (out->flags & WIRE_DESC_IPC) {
		out->host_id = get_u(&c, 8);
		get(&c, out->ipc, sizeof(out->ipc));
		out->ipc_offset = get_u(&c, 8);
	}
	if (c.bad || c.pos != c.cap || out->engine_id == 0)
		return -XFER_EBADWIRE;
	/* The remote address range must not wrap; each NIC's base is checked so
	 * that base + len is representable before any write is built from it. */
	for (unsigned i = 0; i < out->nnics; i++)
		if (out->nic[i].base > UINT64_MAX - out->len)
			return -XFER_EBADWIRE;
	return 0;
}
