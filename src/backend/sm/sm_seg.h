/* The shared segment of one directed pair of NICs: what the initiator (the
 * side that connected) and the target (the side that accepted) both map.
 * The initiator creates it (a sealed memfd, passed over the socket), so
 * nothing is left in /dev/shm or anywhere else when either process dies.
 *
 * Two single-producer single-consumer rings live in it: requests (initiator
 * -> target) and completions (target -> initiator), plus one payload slot
 * per request for data carried inline. Head and tail indices and the two
 * "consumer sleeps" flags are the only shared atomics: no lock lives here,
 * so a peer that dies or stops at any instruction cannot wedge us. Every
 * byte read from here is untrusted; entries are copied out before use. */
#ifndef XFER_SM_SEG_H
#define XFER_SM_SEG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SM_SEG_MAGIC 0x53534d58u /* "XMSS" */
#define SM_VERSION 1
/* Requests in flight per connection; a power of two. */
#define SM_SLOTS 256u
/* Payload carried in the segment per request (writes and SENDs up to this
 * size travel inline: two memcpys beat a process_vm_readv call). */
#define SM_INLINE 4096u

enum sm_op {
	SM_OP_WRITE = 1,
	SM_OP_SEND = 2,
};

/* Request flags. */
#define SM_F_IMM 0x01u    /* raise a remote-write event with `imm` once landed */
#define SM_F_INLINE 0x02u /* the payload is in this request's slot, not at `src` */
#define SM_F_CHUNK 0x04u  /* one piece of a request staged through the slots (no CMA) */
#define SM_F_FIRST 0x08u  /* the first piece; `total` is the whole request's length */
#define SM_F_LAST 0x10u   /* the last piece: the request's event and completion */
#define SM_F_KNOWN 0x1fu

/* One request, 64 bytes. `src` is the initiator's virtual address of the
 * payload (the target pulls it with process_vm_readv unless SM_F_INLINE);
 * `raddr` is an offset into the target's region named by `rkey`. */
struct sm_req {
	uint8_t op;
	uint8_t flags;
	uint16_t reserved;
	uint32_t imm;
	uint64_t len;
	uint64_t src;
	uint64_t raddr;
	uint64_t rkey;
	uint64_t total;
	uint64_t reserved2[2];
};
_Static_assert(sizeof(struct sm_req) == 64, "one cache line per request");

/* One completion: the position of the request it answers and its status. */
struct sm_cmp {
	uint64_t seq;
	int32_t status;
	uint32_t reserved;
};

struct sm_seg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t reserved;
	uint32_t slots;
	uint32_t inline_bytes;
	uint64_t nonce; /* also in the hello; the target's CMA probe reads it at the initiator */
	_Alignas(64) _Atomic uint64_t req_tail;  /* written by the initiator */
	_Alignas(64) _Atomic uint64_t req_head;  /* written by the target (informational) */
	_Atomic uint32_t req_sleeping;           /* the target is about to sleep */
	_Alignas(64) _Atomic uint64_t cmp_tail;  /* written by the target */
	_Alignas(64) _Atomic uint64_t cmp_head;  /* written by the initiator */
	_Atomic uint32_t cmp_sleeping;           /* the initiator is about to sleep */
};

/* Offsets of the parts, page-aligned where it matters. */
#define SM_OFF_REQS 4096u
#define SM_OFF_CMPS (SM_OFF_REQS + SM_SLOTS * sizeof(struct sm_req))
#define SM_OFF_DATA 65536u
#define SM_SEG_BYTES ((size_t)SM_OFF_DATA + (size_t)SM_SLOTS * SM_INLINE)
_Static_assert(sizeof(struct sm_seg_hdr) <= SM_OFF_REQS, "header fits its page");
_Static_assert(SM_OFF_CMPS + SM_SLOTS * sizeof(struct sm_cmp) <= SM_OFF_DATA, "rings fit");
_Static_assert((SM_SLOTS & (SM_SLOTS - 1)) == 0, "slots are a power of two");

#endif
