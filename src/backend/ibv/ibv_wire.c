/* Encoding and bounded decoding of the raw backend's address and handshake
 * (formats in ibv_wire.h). */
#include <errno.h>
#include <string.h>

#include "backend/ibv/ibv_wire.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}
static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}
static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t get32(const uint8_t *p)
{
	return get16(p) | (uint32_t)get16(p + 2) << 16;
}
static uint64_t get64(const uint8_t *p)
{
	return get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* Layout: magic 4, version 1, link layer 1, port 1, mtu 1, lid 2, gid
 * index 1, 0 1, UD QPN 4, GID 16, uid 8. */
void xi_ibv_addr_encode(const struct ibv_wire_addr *a, uint8_t out[IBV_ADDR_BYTES])
{
	memset(out, 0, IBV_ADDR_BYTES);
	put32(out, IBV_ADDR_MAGIC);
	out[4] = IBV_WIRE_VERSION;
	out[5] = a->link_layer;
	out[6] = a->port;
	out[7] = a->mtu;
	put16(out + 8, a->lid);
	out[10] = a->gid_index;
	put32(out + 12, a->ud_qpn);
	memcpy(out + 16, a->gid, 16);
	put64(out + 32, a->uid);
}

int xi_ibv_addr_decode(const void *buf, size_t len, struct ibv_wire_addr *out)
{
	const uint8_t *p = buf;
	if (!buf || len != IBV_ADDR_BYTES || get32(p) != IBV_ADDR_MAGIC || p[4] != IBV_WIRE_VERSION)
		return -EINVAL;
	struct ibv_wire_addr a = {.link_layer = p[5], .port = p[6], .mtu = p[7], .lid = get16(p + 8),
				  .gid_index = p[10], .ud_qpn = get32(p + 12), .uid = get64(p + 32)};
	memcpy(a.gid, p + 16, 16);
	/* QPNs 0 and 1 are the special management QPs, never ours. */
	if ((a.link_layer != 1 && a.link_layer != 2) || !a.port || a.mtu < 1 || a.mtu > 5 || p[11] ||
	    a.ud_qpn < 2 || a.ud_qpn > IBV_QPN_MAX || !a.uid)
		return -EINVAL;
	*out = a;
	return 0;
}

/* Layout: magic 4, version 1, flags 1, 0 2, source address 40, dst uid 8,
 * epoch 4, ack epoch 4, QPNs 2 x 4, PSNs 2 x 4, 0 8. */
void xi_ibv_hello_encode(const struct ibv_hello *h, uint8_t out[IBV_HELLO_BYTES])
{
	memset(out, 0, IBV_HELLO_BYTES);
	put32(out, IBV_HELLO_MAGIC);
	out[4] = IBV_WIRE_VERSION;
	out[5] = h->flags;
	xi_ibv_addr_encode(&h->src, out + 8);
	put64(out + 48, h->dst_uid);
	put32(out + 56, h->epoch);
	put32(out + 60, h->ack_epoch);
	for (int i = 0; i < 2; i++) {
		put32(out + 64 + 4 * i, h->qpn[i]);
		put32(out + 72 + 4 * i, h->psn[i]);
	}
}

int xi_ibv_hello_decode(const void *buf, size_t len, struct ibv_hello *out)
{
	const uint8_t *p = buf;
	struct ibv_hello h = {0};
	if (!buf || len != IBV_HELLO_BYTES || get32(p) != IBV_HELLO_MAGIC || p[4] != IBV_WIRE_VERSION ||
	    (p[5] & ~IBV_HELLO_READY) || get16(p + 6) || get64(p + 80))
		return -EINVAL;
	if (xi_ibv_addr_decode(p + 8, IBV_ADDR_BYTES, &h.src))
		return -EINVAL;
	h.flags = p[5];
	h.dst_uid = get64(p + 48);
	h.epoch = get32(p + 56);
	h.ack_epoch = get32(p + 60);
	for (int i = 0; i < 2; i++) {
		h.qpn[i] = get32(p + 64 + 4 * i);
		h.psn[i] = get32(p + 72 + 4 * i);
		if (h.qpn[i] < 2 || h.qpn[i] > IBV_QPN_MAX || h.psn[i] > IBV_PSN_MASK)
			return -EINVAL;
	}
	if (!h.dst_uid || !h.epoch)
		return -EINVAL;
	*out = h;
	return 0;
}
