/* The submission queue's packing: every field of every kind comes out as it
 * went in; the common small submissions (immediate, expectation, message,
 * completion by user_data, default deadline, telemetry stamp) fit the cell's
 * first cache line; and under four producers pushing mixed kinds and one
 * consumer, every submission comes out once and whole. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/subq.h"
#include "helpers.h"

#define PRODUCERS 4
#define PER_PRODUCER 50000
#define LINE_PAYLOAD 56 /* a cache line less the queue's sequence number */

static struct mpmc_queue q;

/* A submission of kind whose every field derives from v. */
static struct sub make(uint8_t kind, uint64_t v, bool ext, bool trace)
{
	struct sub s = {.kind = kind, .flags = (uint32_t)v * 3, .imm = (uint32_t)v ^ 0x5a5a,
			.peer = (uint32_t)(v % 1000)};
	s.to.user_data = v;
	s.to.deadline_ns = v + 1;
	s.to.t_submit = v + 2;
	if (ext) {
		s.tag = v + 3;
		s.to.cb = (xfer_complete_fn)(uintptr_t)(v + 4);
		s.to.cb_ctx = (void *)(uintptr_t)(v + 5);
		s.to.signal = (volatile uint64_t *)(uintptr_t)(v + 6);
		s.to.signal_value = v + 7;
	}
	if (trace) {
		s.t_call = v + 8;
		s.t_enq = v + 9;
	}
	switch (kind) {
	case SUB_SEND:
		s.u.send.buf = (const void *)(uintptr_t)(v + 10);
		s.u.send.len = (uint32_t)v + 11;
		break;
	case SUB_EXPECT:
		s.u.expect.count = (uint32_t)v + 12;
		break;
	case SUB_BARRIER:
		s.u.barrier.group = (struct xfer_group *)(uintptr_t)(v + 13);
		break;
	case SUB_CALL:
		s.u.call = (struct xi_call *)(uintptr_t)(v + 14);
		break;
	case SUB_WRITE:
	case SUB_PAGED:
	case SUB_SCATTER:
		/* Every byte of the union: whichever member the kind uses. */
		for (size_t i = 0; i < sizeof(s.u); i++)
			((unsigned char *)&s.u)[i] = (unsigned char)(v + i);
		break;
	}
	return s;
}

static size_t used_union_bytes(uint8_t kind)
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

static void check_same(const struct sub *a, const struct sub *b)
{
	CHECK(a->kind == b->kind && a->flags == b->flags && a->imm == b->imm && a->peer == b->peer);
	CHECK(a->tag == b->tag && a->t_call == b->t_call && a->t_enq == b->t_enq);
	CHECK(!memcmp(&a->to, &b->to, sizeof(a->to)));
	switch (a->kind) {
	case SUB_SEND:
		CHECK(a->u.send.buf == b->u.send.buf && a->u.send.len == b->u.send.len);
		break;
	case SUB_EXPECT:
		CHECK(a->u.expect.count == b->u.expect.count);
		break;
	case SUB_BARRIER:
		CHECK(a->u.barrier.group == b->u.barrier.group);
		break;
	case SUB_CALL:
		CHECK(a->u.call == b->u.call);
		break;
	default:
		CHECK(!memcmp(&a->u, &b->u, used_union_bytes(a->kind)));
	}
}

static const uint8_t kinds[] = {SUB_SEND,   SUB_WRITE, SUB_PAGED,   SUB_IMM, SUB_EXPECT,
				SUB_CANCEL, SUB_SCATTER, SUB_BARRIER, SUB_CALL};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static void *producer(void *arg)
{
	uint64_t base = (uint64_t)(uintptr_t)arg * PER_PRODUCER;
	for (uint64_t i = 0; i < PER_PRODUCER; i++) {
		uint64_t v = base + i;
		struct sub s = make(kinds[v % NKINDS], v, v & 1, v & 2);
		while (!xi_subq_push(&q, &s))
			;
	}
	return NULL;
}

int main(void)
{
	/* Round trips, one kind at a time, with and without the optional parts. */
	CHECK_OK(xi_subq_init(&q, 4));
	for (size_t k = 0; k < NKINDS; k++)
		for (int opt = 0; opt < 4; opt++) {
			struct sub in = make(kinds[k], 1000 + k * 7 + opt, opt & 1, opt & 2), out;
			memset(&out, 0xee, sizeof(out));
			CHECK(xi_subq_push(&q, &in));
			CHECK(xi_subq_pop(&q, &out));
			check_same(&in, &out);
		}
	struct sub s = make(SUB_IMM, 1, false, false), out;
	for (int i = 0; i < 4; i++)
		CHECK(xi_subq_push(&q, &s));
	CHECK(!xi_subq_push(&q, &s)); /* full */
	for (int i = 0; i < 4; i++)
		CHECK(xi_subq_pop(&q, &out));
	CHECK(!xi_subq_pop(&q, &out)); /* empty */
	xi_mpmc_destroy(&q);

	/* The ping-pong's submissions fit one line; the others only grow by
	 * what they carry. */
	CHECK(xi_subq_packed_len(&(struct sub){.kind = SUB_IMM}) <= LINE_PAYLOAD);
	CHECK(xi_subq_packed_len(&s) <= LINE_PAYLOAD);
	struct sub send = make(SUB_SEND, 1, false, false), expect = make(SUB_EXPECT, 1, false, false);
	CHECK(xi_subq_packed_len(&send) <= LINE_PAYLOAD);
	CHECK(xi_subq_packed_len(&expect) <= LINE_PAYLOAD);
	struct sub wr = make(SUB_WRITE, 1, false, false);
	CHECK(xi_subq_packed_len(&wr) <= 2 * 64 - 8);
	struct sub big = make(SUB_PAGED, 1, true, true);
	CHECK(xi_subq_packed_len(&big) > xi_subq_packed_len(&wr));

	/* Mixed kinds and lengths from four producers, one consumer (the worker). */
	CHECK_OK(xi_subq_init(&q, 64));
	static atomic_uchar seen[PRODUCERS * PER_PRODUCER];
	pthread_t p[PRODUCERS];
	for (uintptr_t i = 0; i < PRODUCERS; i++)
		CHECK(pthread_create(&p[i], NULL, producer, (void *)i) == 0);
	for (int got = 0; got < PRODUCERS * PER_PRODUCER;) {
		if (!xi_subq_pop(&q, &out))
			continue;
		uint64_t v = out.to.user_data;
		CHECK(v < PRODUCERS * PER_PRODUCER);
		struct sub want = make(kinds[v % NKINDS], v, v & 1, v & 2);
		check_same(&want, &out);
		CHECK(atomic_fetch_add(&seen[v], 1) == 0);
		got++;
	}
	for (int i = 0; i < PRODUCERS; i++)
		pthread_join(p[i], NULL);
	xi_mpmc_destroy(&q);
	printf("subq: ok\n");
	return 0;
}
