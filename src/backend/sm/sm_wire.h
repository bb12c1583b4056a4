/* The same-host backend's formats: the NIC address a peer connects to, the
 * two connection messages (hello, ack) and the checks applied to a request
 * or completion read from shared memory. Pure functions over untrusted
 * bytes, fuzzed by tests/fuzz/fuzz_sm.c. */
#ifndef XFER_SM_WIRE_H
#define XFER_SM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/sm/sm_seg.h"

#define SM_NAME_BYTES 16
#define SM_ADDR_BYTES 24 /* magic 4, version 2, flags 2, name 16 */
#define SM_HELLO_BYTES 40
#define SM_ACK_BYTES 12

/* A NIC's address: the random name of its listening socket. */
struct sm_addr {
	uint8_t name[SM_NAME_BYTES];
};

/* Hello flags: the initiator will not be read through CMA (XFER_SM_CMA=0). */
#define SM_HELLO_NO_CMA 0x1u
#define SM_HELLO_KNOWN 0x1u

/* First message on a connection, with the segment's memfd (SCM_RIGHTS). */
struct sm_hello {
	uint16_t flags;
	uint32_t slots, inline_bytes;
	uint64_t seg_bytes;
	uint64_t probe_addr; /* where the initiator mapped the segment: the CMA probe reads its nonce */
	uint64_t nonce;
};

/* Ack flags: the target pulls payloads with process_vm_readv. */
#define SM_ACK_CMA 0x1u
#define SM_ACK_KNOWN 0x1u

/* The target's answer: 0 and how it reads payloads, or why it refused. */
struct sm_ack {
	uint16_t flags;
	int32_t status;
};

/* A request as the target acts on it, after xi_sm_req_parse. */
struct sm_req_view {
	uint8_t op, flags;
	uint32_t imm;
	uint64_t len, src, raddr, rkey, total;
};

/* Encoders return the length written (cap must hold it) or -ENOSPC;
 * decoders 0 or -XFER_EBADWIRE / -XFER_EVERSION. */
int xi_sm_addr_encode(const struct sm_addr *a, uint8_t *buf, size_t cap);
int xi_sm_addr_decode(const void *buf, size_t len, struct sm_addr *out);
int xi_sm_hello_encode(const struct sm_hello *h, uint8_t *buf, size_t cap);
int xi_sm_hello_decode(const void *buf, size_t len, struct sm_hello *out);
int xi_sm_ack_encode(const struct sm_ack *a, uint8_t *buf, size_t cap);
int xi_sm_ack_decode(const void *buf, size_t len, struct sm_ack *out);

/* Checks a request copied out of shared memory: 0 with *out filled, or
 * -EPROTO when no honest initiator could have written it. */
int xi_sm_req_parse(const struct sm_req *raw, struct sm_req_view *out);

/* A completion's status as the initiator reports it: 0 or a negative errno;
 * anything else a peer may have written becomes -EIO. */
int xi_sm_status_clean(int32_t status);

/* The abstract socket name of an address: "xfer-sm-" and 32 hex digits. */
#define SM_SOCK_NAME_LEN (8 + 2 * SM_NAME_BYTES)
void xi_sm_sock_name(const struct sm_addr *a, char out[SM_SOCK_NAME_LEN + 1]);

#endif
