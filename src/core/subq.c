#include "core/subq.h"

#include <stdint.h>
#include <string.h>

/* What every submission carries, in the cell's first line after the queue's
 * 8-byte sequence number (56 bytes), with the payload of the small kinds. */
struct subq_head {
	uint64_t user_data, deadline_ns, t_submit;
	uint32_t flags, imm, peer;
	uint8_t kind;
	uint8_t parts; /* PART_* that follow the head, in that order */
	uint16_t pad_;
	union {
		struct {
			const void *buf;
			uint32_t len;
		} send;
		uint32_t count;           /* SUB_EXPECT */
		struct xfer_group *group; /* SUB_BARRIER */
		struct xi_call *call;     /* SUB_CALL */
	} in;
};
_Static_assert(sizeof(struct subq_head) == 56, "the head must fill the sequence number's line");

/* The rest of the completion, when any of it is set. */
struct subq_ext {
	uint64_t tag;
	xfer_complete_fn cb;
	void *cb_ctx;
	volatile uint64_t *signal;
	uint64_t signal_value;
};

struct subq_trace {
	uint64_t t_call, t_enq;
};

enum { PART_EXT = 1, PART_TRACE = 2 };

/* The kinds whose payload does not fit the head: it follows as is. */
static size_t body_len(uint8_t kind)
{
	switch (kind) {
	case SUB_WRITE:
		return sizeof(((struct sub *)0)->u.write);
	case SUB_PAGED:
		return sizeof(((struct sub *)0)->u.paged);
	case SUB_SCATTER:
		return sizeof(((struct sub *)0)->u.scatter);
	default:
		return 0;
	}
}

#define SUBQ_MAX (sizeof(struct subq_head) + sizeof(struct subq_ext) + sizeof(struct subq_trace) + \
		  sizeof(((struct sub *)0)->u))
_Static_assert(sizeof(struct subq_head) % 8 == 0 && sizeof(struct subq_ext) % 8 == 0 &&
		       sizeof(struct subq_trace) % 8 == 0,
	       "parts keep 8-byte alignment");

static uint8_t parts_of(const struct sub *s)
{
	const struct xi_target *t = &s->to;
	uint8_t parts = 0;
	if (s->tag || t->cb || t->cb_ctx || t->signal || t->signal_value)
		parts |= PART_EXT;
	if (s->t_call || s->t_enq)
		parts |= PART_TRACE;
	return parts;
}

static size_t packed_len(const struct sub *s, uint8_t parts)
{
	return sizeof(struct subq_head) + (parts & PART_EXT ? sizeof(struct subq_ext) : 0) +
	       (parts & PART_TRACE ? sizeof(struct subq_trace) : 0) + body_len(s->kind);
}

size_t xi_subq_packed_len(const struct sub *s)
{
	return packed_len(s, parts_of(s));
}

int xi_subq_init(struct mpmc_queue *q, size_t capacity)
{
	return xi_mpmc_init(q, capacity, SUBQ_MAX);
}

bool xi_subq_push(struct mpmc_queue *q, const struct sub *s)
{
	size_t pos;
	unsigned char *cell = xi_mpmc_claim(q, &pos);
	if (!cell)
		return false;
	uint8_t parts = parts_of(s);
	struct subq_head h = {.user_data = s->to.user_data, .deadline_ns = s->to.deadline_ns,
			      .t_submit = s->to.t_submit, .flags = s->flags, .imm = s->imm,
			      .peer = s->peer, .kind = s->kind, .parts = parts};
	switch (s->kind) {
	case SUB_SEND:
		h.in.send.buf = s->u.send.buf;
		h.in.send.len = s->u.send.len;
		break;
	case SUB_EXPECT:
		h.in.count = s->u.expect.count;
		break;
	case SUB_BARRIER:
		h.in.group = s->u.barrier.group;
		break;
	case SUB_CALL:
		h.in.call = s->u.call;
		break;
	}
	memcpy(cell, &h, sizeof(h));
	size_t at = sizeof(h);
	if (parts & PART_EXT) {
		struct subq_ext x = {.tag = s->tag, .cb = s->to.cb, .cb_ctx = s->to.cb_ctx,
				     .signal = s->to.signal, .signal_value = s->to.signal_value};
		memcpy(cell + at, &x, sizeof(x));
		at += sizeof(x);
	}
	if (parts & PART_TRACE) {
		struct subq_trace tr = {.t_call = s->t_call, .t_enq = s->t_enq};
		memcpy(cell + at, &tr, sizeof(tr));
		at += sizeof(tr);
	}
	memcpy(cell + at, &s->u, body_len(s->kind));
	xi_mpmc_publish(q, pos);
	return true;
}

bool xi_subq_pop(struct mpmc_queue *q, struct sub *s)
{
	size_t pos;
	const unsigned char *cell = xi_mpmc_take(q, &pos);
	if (!cell)
		return false;
	struct subq_head h;
	memcpy(&h, cell, sizeof(h));
	*s = (struct sub){.kind = h.kind, .flags = h.flags, .imm = h.imm, .peer = h.peer};
	s->to.user_data = h.user_data;
	s->to.deadline_ns = h.deadline_ns;
	s->to.t_submit = h.t_submit;
	switch (h.kind) {
	case SUB_SEND:
		s->u.send.buf = h.in.send.buf;
		s->u.send.len = h.in.send.len;
		break;
	case SUB_EXPECT:
		s->u.expect.count = h.in.count;
		break;
	case SUB_BARRIER:
		s->u.barrier.group = h.in.group;
		break;
	case SUB_CALL:
		s->u.call = h.in.call;
		break;
	}
	size_t at = sizeof(h);
	if (h.parts & PART_EXT) {
		struct subq_ext x;
		memcpy(&x, cell + at, sizeof(x));
		at += sizeof(x);
		s->tag = x.tag;
		s->to.cb = x.cb;
		s->to.cb_ctx = x.cb_ctx;
		s->to.signal = x.signal;
		s->to.signal_value = x.signal_value;
	}
	if (h.parts & PART_TRACE) {
		struct subq_trace tr;
		memcpy(&tr, cell + at, sizeof(tr));
		at += sizeof(tr);
		s->t_call = tr.t_call;
		s->t_enq = tr.t_enq;
	}
	memcpy(&s->u, cell + at, body_len(h.kind));
	xi_mpmc_release(q, pos);
	return true;
}
