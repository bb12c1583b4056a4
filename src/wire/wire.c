#include "wire/wire.h"
#include "wire/wire_cursor.h"

#include <errno.h>
#include <string.h>

#include "xfer.h"

static const uint8_t addr_magic[4] = {'X', 'F', 'R', 'A'};
static const uint8_t desc_magic[4] = {'X', 'F', 'R', 'D'};

uint32_t xi_wire_crc32(const void *buf, size_t len)
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

static int finish_encode(struct wire_cursor *c, size_t *need)
{
	uint32_t crc = c->bad || !c->w ? 0 : xi_wire_crc32(c->w, c->pos);
	wc_put_u(c, crc, 4);
	if (need)
		*need = c->pos;
	if (c->bad)
		return -ENOSPC;
	return (int)c->pos;
}

/* Checks magic, version and CRC; leaves the cursor after the version. */
static int start_decode(struct wire_cursor *c, const void *buf, size_t len, const uint8_t magic[4])
{
	uint8_t m[4];
	if (!buf || len < 4 + 2 + 4)
		return -XFER_EBADWIRE;
	if (len > 64 * 1024)
		return -XFER_EBADWIRE;
	c->r = buf;
	c->cap = len - 4;
	wc_get(c, m, 4);
	if (memcmp(m, magic, 4) != 0)
		return -XFER_EBADWIRE;
	if (wc_get_u(c, 2) != WIRE_VERSION)
		return -XFER_EVERSION;
	const uint8_t *tail = (const uint8_t *)buf + len - 4;
	uint32_t crc = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 | (uint32_t)tail[2] << 16 |
		       (uint32_t)tail[3] << 24;
	if (crc != xi_wire_crc32(buf, len - 4))
		return -XFER_EBADWIRE;
	return 0;
}

int xi_wire_addr_encode(const struct wire_addr *a, void *buf, size_t cap, size_t *need)
{
	struct wire_cursor c = {.w = buf, .cap = buf ? cap : 0};
	size_t plen = strnlen(a->provider, WIRE_PROV_MAX);
	if (a->nnics == 0 || a->nnics > XFER_NIC_MAX || plen == 0 || plen >= WIRE_PROV_MAX)
		return -EINVAL;
	wc_put(&c, addr_magic, 4);
	wc_put_u(&c, WIRE_VERSION, 2);
	wc_put_u(&c, a->engine_id, 8);
	wc_put_u(&c, plen, 1);
	wc_put(&c, a->provider, plen);
	wc_put_u(&c, a->msg_max, 4);
	wc_put_u(&c, a->nnics, 1);
	for (unsigned i = 0; i < a->nnics; i++) {
		const struct wire_nic_addr *n = &a->nic[i];
		if (n->len == 0 || n->len > WIRE_NIC_ADDR_MAX)
			return -EINVAL;
		wc_put_u(&c, n->len, 2);
		wc_put(&c, n->bytes, n->len);
		wc_put_u(&c, n->sink_base, 8);
		wc_put_u(&c, n->sink_key, 8);
	}
	return finish_encode(&c, need);
}

int xi_wire_addr_decode(const void *buf, size_t len, struct wire_addr *out)
{
	struct wire_cursor c = {0};
	int rc = start_decode(&c, buf, len, addr_magic);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	out->engine_id = wc_get_u(&c, 8);
	size_t plen = wc_get_u(&c, 1);
	if (plen == 0 || plen >= WIRE_PROV_MAX)
		return -XFER_EBADWIRE;
	wc_get(&c, out->provider, plen);
	if (memchr(out->provider, 0, plen))
		return -XFER_EBADWIRE;
	out->msg_max = (uint32_t)wc_get_u(&c, 4);
	out->nnics = (uint8_t)wc_get_u(&c, 1);
	if (out->nnics == 0 || out->nnics > XFER_NIC_MAX)
		return -XFER_EBADWIRE;
	for (unsigned i = 0; i < out->nnics; i++) {
		struct wire_nic_addr *n = &out->nic[i];
		n->len = (uint16_t)wc_get_u(&c, 2);
		if (n->len == 0 || n->len > WIRE_NIC_ADDR_MAX)
			return -XFER_EBADWIRE;
		wc_get(&c, n->bytes, n->len);
		n->sink_base = wc_get_u(&c, 8);
		n->sink_key = wc_get_u(&c, 8);
	}
	if (c.bad || c.pos != c.cap || out->engine_id == 0)
		return -XFER_EBADWIRE;
	return 0;
}

int xi_wire_desc_encode(const struct wire_desc *d, void *buf, size_t cap, size_t *need)
{
	struct wire_cursor c = {.w = buf, .cap = buf ? cap : 0};
	if (d->nnics == 0 || d->nnics > XFER_NIC_MAX)
		return -EINVAL;
	wc_put(&c, desc_magic, 4);
	wc_put_u(&c, WIRE_VERSION, 2);
	wc_put_u(&c, d->engine_id, 8);
	wc_put_u(&c, d->len, 8);
	wc_put_u(&c, d->nnics, 1);
	for (unsigned i = 0; i < d->nnics; i++) {
		wc_put_u(&c, d->nic[i].base, 8);
		wc_put_u(&c, d->nic[i].key, 8);
	}
	if (d->flags & ~WIRE_DESC_FLAGS)
		return -EINVAL;
	wc_put_u(&c, d->flags, 1);
	wc_put_u(&c, d->region_id, 8);
	if (d->flags & WIRE_DESC_IPC) {
		wc_put_u(&c, d->host_id, 8);
		wc_put(&c, d->ipc, sizeof(d->ipc));
		wc_put_u(&c, d->ipc_offset, 8);
	}
	return finish_encode(&c, need);
}

int xi_wire_desc_decode(const void *buf, size_t len, struct wire_desc *out)
{
	struct wire_cursor c = {0};
	int rc = start_decode(&c, buf, len, desc_magic);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	out->engine_id = wc_get_u(&c, 8);
	out->len = wc_get_u(&c, 8);
	out->nnics = (uint8_t)wc_get_u(&c, 1);
	if (out->nnics == 0 || out->nnics > XFER_NIC_MAX)
		return -XFER_EBADWIRE;
	for (unsigned i = 0; i < out->nnics; i++) {
		out->nic[i].base = wc_get_u(&c, 8);
		out->nic[i].key = wc_get_u(&c, 8);
	}
	out->flags = (uint8_t)wc_get_u(&c, 1);
	if (out->flags & ~WIRE_DESC_FLAGS)
		return -XFER_EBADWIRE;
	out->region_id = wc_get_u(&c, 8);
	if (out->flags & WIRE_DESC_IPC) {
		out->host_id = wc_get_u(&c, 8);
		wc_get(&c, out->ipc, sizeof(out->ipc));
		out->ipc_offset = wc_get_u(&c, 8);
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
