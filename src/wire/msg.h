/* The in-band messages: every SEND between two engines, the one codec of
 * their bytes. A message is a 16-byte header (magic, body length, the
 * sender's engine id) and a body:
 *
 *   APP     "XFMS"  the application's bytes (xfer_send), at most msg_max
 *   PING    "XFHB"  none: a liveness probe, answered with PONG
 *   PONG    "XFPG"  none
 *   BYE     "XFBY"  none: the sender's engine is stopping
 *   NOTICE  "XFNT"  u64 region id, u32 imm, u32 count, u32 nranges, u32 0,
 *                   then nranges x (u64 offset, u64 length): data for a GPU
 *                   region landed in its host mirror (ranges) or was copied
 *                   in place (no ranges); count immediates follow it
 *
 * Integers are little-endian. Received bytes are untrusted: the decoder is
 * bounded (it reads nothing past the input) and total (every input is one
 * valid message or -XFER_EBADWIRE), and it is fuzzed (tests/fuzz/fuzz_msg.c).
 * A new message: a magic here, its encoder and its case in xi_msg_decode,
 * a seed in tests/fuzz/make_seeds.c, and its handler in core/rx.c. */
#ifndef XFER_WIRE_MSG_H
#define XFER_WIRE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "wire/wire_cursor.h"

#define XI_MSG_HDR 16u
#define XI_MSG_APP 0x58464d53u    /* "XFMS" */
#define XI_MSG_PING 0x58464842u   /* "XFHB" */
#define XI_MSG_PONG 0x58465047u   /* "XFPG" */
#define XI_MSG_BYE 0x58464259u    /* "XFBY" */
#define XI_MSG_NOTICE 0x58464e54u /* "XFNT" */
#define XI_NOTICE_HDR 24u   /* a notice's body before its ranges */
#define XI_NOTICE_RANGE 16u /* one (offset, length) */

struct xi_notice {
	uint64_t region_id;
	uint32_t imm, count, nranges;
	const uint8_t *ranges; /* decoded notices: nranges ranges, read with xi_notice_range */
};

struct xi_msg {
	uint32_t magic;
	uint64_t src_id; /* self-declared by the sender: not authenticated */
	const uint8_t *body;
	uint32_t len; /* of the body */
	struct xi_notice notice; /* NOTICE only */
};

/* Decodes the len bytes received at buf; app_max bounds an APP body. */
int xi_msg_decode(const void *buf, size_t len, uint32_t app_max, struct xi_msg *out);
/* The header of a message already decoded once (a receive slot the worker
 * validated): magic, src_id, body and len. */
void xi_msg_get_hdr(const uint8_t *buf, struct xi_msg *out);
/* Range i (< nranges) of a decoded notice. */
void xi_notice_range(const struct xi_notice *n, uint32_t i, uint64_t *off, uint64_t *len);

/* Writes the header of a message whose body of body_len bytes follows. */
void xi_msg_put_hdr(uint8_t *buf, uint32_t magic, uint32_t body_len, uint64_t src_id);
/* Encoding a notice of n->nranges ranges into buf (cap bytes, header
 * included): begin, one xi_notice_add per range, then xi_notice_end, which
 * returns the message's length or -ENOSPC (too small, or a range missing). */
void xi_notice_begin(struct wire_cursor *c, uint8_t *buf, size_t cap, uint64_t src_id,
		     const struct xi_notice *n);
void xi_notice_add(struct wire_cursor *c, uint64_t off, uint64_t len);
int xi_notice_end(struct wire_cursor *c, const struct xi_notice *n);
/* How many ranges fit in one notice to a receiver taking bodies of room
 * bytes (at least one). */
uint32_t xi_notice_ranges_max(uint32_t room);

#endif
