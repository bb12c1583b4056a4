/* Byte formats of engine addresses and region descriptors. Both travel through
 * the application (sockets, key-value stores, HTTP) and are parsed as untrusted:
 * every field is bounded, the version is checked and a CRC catches corruption. */
#ifndef XFER_WIRE_H
#define XFER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "util/limits.h"

#define WIRE_NIC_ADDR_MAX 256
#define WIRE_PROV_MAX 32
#define WIRE_VERSION 2 /* 2: descriptors carry flags, region id, IPC handle */

struct wire_nic_addr {
	uint16_t len;
	uint8_t bytes[WIRE_NIC_ADDR_MAX];
	uint64_t sink_base; /* the zero-length-write target every engine exports */
	uint64_t sink_key;
};

struct wire_addr {
	uint64_t engine_id;
	char provider[WIRE_PROV_MAX]; /* NUL-terminated */
	uint32_t msg_max;             /* largest SEND it can receive */
	uint8_t nnics;
	struct wire_nic_addr nic[XFER_NIC_MAX];
};

struct wire_rkey {
	uint64_t base; /* added to the offset: 0 for offset-addressed providers */
	uint64_t key;
};

/* Region flags: where the bytes really live. */
#define WIRE_DESC_STAGED 0x1 /* GPU memory: writes land in a host mirror, announced by notice */
#define WIRE_DESC_IPC 0x2    /* a CUDA IPC handle follows, for peers on the same host */
#define WIRE_DESC_FLAGS (WIRE_DESC_STAGED | WIRE_DESC_IPC)

struct wire_desc {
	uint64_t engine_id;
	uint64_t len;
	uint8_t nnics;
	struct wire_rkey nic[XFER_NIC_MAX];
	uint8_t flags;
	uint64_t region_id;
	uint64_t host_id;    /* with WIRE_DESC_IPC */
	uint8_t ipc[64];     /* with WIRE_DESC_IPC */
	uint64_t ipc_offset; /* of the region within the IPC allocation */
};

/* Encoders return the encoded length, or -ENOSPC with *need set. */
int xi_wire_addr_encode(const struct wire_addr *a, void *buf, size_t cap, size_t *need);
int xi_wire_addr_decode(const void *buf, size_t len, struct wire_addr *out);
int xi_wire_desc_encode(const struct wire_desc *d, void *buf, size_t cap, size_t *need);
int xi_wire_desc_decode(const void *buf, size_t len, struct wire_desc *out);

uint32_t xi_wire_crc32(const void *buf, size_t len);

#endif
