/* Messages between decoders and prefillers, carried by xfer_send. They are
 * untrusted bytes: versioned, every length bounded, CRC-checked. A request
 * with more page indices than one message holds travels in several chunks,
 * each self-describing, so that they may arrive in any order. */
#ifndef XFER_KV_WIRE_H
#define XFER_KV_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "xfer_kv.h"

#define KV_WIRE_MAGIC 0x4d564b58u /* "XKVM" */
#define KV_WIRE_VERSION 1
#define KV_NPAGES_MAX (1u << 24)

enum kv_msg_type {
	KV_MSG_REQ = 1,    /* decoder -> prefiller: pages to fill */
	KV_MSG_CANCEL = 2, /* decoder -> prefiller: stop, confirm when drained */
	KV_MSG_ACK = 3,    /* prefiller -> decoder: nothing more of dseq can land */
	KV_MSG_FAIL = 4,   /* prefiller -> decoder: dseq failed (quiesced or not) */
	KV_MSG_BYE = 5,    /* prefiller -> decoder: leaving, accepts nothing more */
	KV_MSG_HELLO = 6,  /* decoder -> prefiller: add me now (liveness starts at once) */
};

struct kv_msg {
	uint32_t type;
	uint64_t dseq; /* the decoder's handle of the request */
	/* REQ (and CANCEL: id, dst.tp_rank) */
	uint64_t id;
	uint32_t imm, expected, tokens, npages, first, count, ctx_cap;
	uint64_t ctx_off; /* of the request's context slot in the context region */
	uint32_t xfer_ms; /* how long the prefiller may keep writing */
	struct xfer_kv_layout src, dst;
	const uint8_t *kv_desc, *ctx_desc, *app;
	uint16_t kv_desc_len, ctx_desc_len, app_len;
	const uint8_t *pages; /* count little-endian u32, unaligned */
	/* REQ, CANCEL, HELLO: the decoder's engine address, to answer it */
	const uint8_t *addr;
	uint16_t addr_len;
	/* FAIL */
	int32_t err;
	uint8_t quiesced;
};

/* Bytes of a REQ's fixed part (everything but page indices). */
size_t xi_kv_req_fixed_len(const struct kv_msg *m);
/* Encodes m into buf (cap bytes); pages are m->count u32 from `pages`.
 * Returns the length or -ENOSPC. */
int xi_kv_msg_encode(const struct kv_msg *m, const uint32_t *pages, void *buf, size_t cap);
/* Parses untrusted bytes; pointers in *m point into buf. 0, -XFER_EBADWIRE,
 * -XFER_EVERSION. */
int xi_kv_msg_decode(const void *buf, size_t len, struct kv_msg *m);
/* Whether bytes start like a module message (so they are not the application's). */
int xi_kv_msg_is_ours(const void *buf, size_t len);
uint32_t xi_kv_page_at(const struct kv_msg *m, uint32_t i);

#endif
