/* The raw backend's own bytes on the wire: a NIC's address (inside the
 * engine address, opaque to the core) and the connection handshake message
 * carried by UD datagrams. Both come from the network or the application's
 * control plane and are parsed as untrusted: fixed sizes, a magic, a
 * version, every field bounded. Little-endian, like src/wire.c. */
#ifndef XFER_IBV_WIRE_H
#define XFER_IBV_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IBV_ADDR_MAGIC 0x56424958u  /* "XIBV" */
#define IBV_HELLO_MAGIC 0x48424958u /* "XIBH" */
#define IBV_WIRE_VERSION 1
#define IBV_ADDR_BYTES 40
#define IBV_HELLO_BYTES 88
#define IBV_QPN_MAX 0xffffffu
#define IBV_PSN_MASK 0xffffffu

/* Everything a peer needs to reach one of our NICs. */
struct ibv_wire_addr {
	uint8_t link_layer; /* IBV_LINK_LAYER_INFINIBAND (1) or _ETHERNET (2) */
	uint8_t port;
	uint8_t mtu;     /* enum ibv_mtu, 1 (256) .. 5 (4096) */
	uint8_t gid_index; /* ours, for the peer's information only */
	uint16_t lid;
	uint32_t ud_qpn; /* where handshakes go */
	uint8_t gid[16];
	uint64_t uid;    /* this NIC endpoint's incarnation: random, never 0 */
};

/* One handshake message: "these are my queue pairs (generation epoch); I
 * am connected to your generation ack_epoch (0: to none)". Both sides send
 * the same message, so simultaneous connects need no tie-break. */
#define IBV_HELLO_READY 0x1 /* the sender has seen the receiver's ack of its epoch */
struct ibv_hello {
	struct ibv_wire_addr src;
	uint64_t dst_uid;
	uint32_t epoch;     /* >= 1 */
	uint32_t ack_epoch; /* 0 or the receiver's epoch the sender's QPs are connected to */
	uint32_t qpn[2];    /* message QP, data QP */
	uint32_t psn[2];
	uint8_t flags;
};

void xi_ibv_addr_encode(const struct ibv_wire_addr *a, uint8_t out[IBV_ADDR_BYTES]);
/* 0, or -EINVAL for anything but a well-formed version-1 address. */
int xi_ibv_addr_decode(const void *buf, size_t len, struct ibv_wire_addr *out);
void xi_ibv_hello_encode(const struct ibv_hello *h, uint8_t out[IBV_HELLO_BYTES]);
int xi_ibv_hello_decode(const void *buf, size_t len, struct ibv_hello *out);

#endif
