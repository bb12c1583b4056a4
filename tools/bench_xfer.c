/* xfer measured through its public API only, as an application would use it:
 * a window of calls reaped with xfer_cq_wait, immediates counted with
 * xfer_expect_imm, SENDs received with xfer_recv_wait. The engine's own
 * trace supplies the host-proxy overhead breakdown. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_impl.h"
#include "xfer.h"

#define WAIT_MS 1000
#define TARGET_WAIT_MS 60000
#define UD_WRITE (1ull << 40) /* user_data of fire-and-reap writes in ping-pongs */
#define UD_PONG (2ull << 40)
#define UD_STOP (3ull << 40)
#define UD_PING (4ull << 40)

struct xside {
	xfer_engine_t *e;
	xfer_peer_t peer;
	unsigned busy_poll;
};

int xside_open(struct xside **out, const char *provider, const char *nics, int worker_cpu, int busy_poll)
{
	struct xside *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	struct xfer_attr a;
	xfer_attr_init(&a);
	a.provider = provider;
	a.nics = nics;
	if (worker_cpu >= 0)
		a.worker_cpu = worker_cpu;
	if (busy_poll >= 0)
		a.busy_poll = (uint32_t)busy_poll;
	x->busy_poll = a.busy_poll;
	int ret = xfer_engine_create(&a, &x->e);
	if (ret) {
		free(x);
		return ret;
	}
	x->peer = XFER_PEER_NONE;
	*out = x;
	return 0;
}

int xside_connect(struct xside *x, struct ctl *ctl)
{
	uint8_t addr[XFER_ADDR_MAX];
	uint32_t len;
	int n = xfer_engine_addr(x->e, addr, sizeof(addr), NULL);
	if (n < 0)
		return n;
	/* Both sides send first: an address fits in any socket buffer. */
	int ret = ctl_send(ctl, MSG_ADDR, addr, (uint32_t)n);
	if (!ret)
		ret = ctl_expect(ctl, MSG_ADDR, addr, sizeof(addr), &len, TARGET_WAIT_MS);
	if (!ret)
		ret = xfer_peer_add(x->e, addr, len, &x->peer);
	return ret;
}

unsigned xside_busy_poll(const struct xside *x)
{
	return x->busy_poll;
}

const char *xside_provider(const struct xside *x)
{
	return xfer_engine_provider(x->e);
}

const char *xside_nic(const struct xside *x, unsigned i)
{
	return xfer_engine_nic_name(x->e, i);
}

bool xside_delivery_complete(const struct xside *x)
{
	struct xfer_nic_info info;
	return xfer_engine_nic_info(x->e, 0, &info) == 0 && info.delivery_complete;
}

unsigned xside_nic_count(const struct xside *x)
{
	return xfer_engine_nic_count(x->e);
}

void xside_disconnect(struct xside *x)
{
	/* Before the peer goes away, or the engine's liveness checks would
	 * report it down. */
	if (x && x->peer != XFER_PEER_NONE && xfer_peer_remove(x->e, x->peer) == 0)
		x->peer = XFER_PEER_NONE;
}

void xside_close(struct xside *x)
{
	if (!x)
		return;
	xfer_engine_destroy(x->e);
	free(x);
}

/* ------------------------------------------------------------- initiator */

struct xrun {
	struct xside *x;
	const struct bench_case *c;
	struct layout l;
	uint8_t *src, *rbuf;
	xfer_mr_t *mr;
	xfer_rmr_t *rmr;
	struct meas *m;
	bool trace, timed;
	uint64_t writes_out; /* ping-pong writes or sends not yet reaped */
	bool armed;          /* imm ping-pong: the pong's expectation is armed */
};

static void drain_traces(struct xrun *r)
{
	struct xfer_trace t[256];
	int n;
	while ((n = xfer_trace_read(r->x->e, t, 256)) > 0) {
		for (int i = 0; i < n && r->timed; i++) {
			if (!t[i].t_call || !t[i].t_first_ret)
				continue; /* failed before its first post */
			samples_add(&r->m->ov[OV_CALL_ENQ], t[i].t_enq - t[i].t_call);
			samples_add(&r->m->ov[OV_ENQ_FIRST], t[i].t_first - t[i].t_enq);
			samples_add(&r->m->ov[OV_POST_ALL], t[i].t_last - t[i].t_first);
			samples_add(&r->m->ov[OV_CALL_FIRST], t[i].t_first - t[i].t_call);
			samples_add(&r->m->ov[OV_ENQ_DEQ], t[i].t_deq - t[i].t_enq);
			samples_add(&r->m->ov[OV_PROV_POST], t[i].t_first_ret - t[i].t_first);
		}
	}
}

/* One call in how many the engine traces. A traced call costs the engine
 * about 0.1 us of clock reads, which the raw loop does not pay: on the
 * short calls (single writes under 256 KiB, ping-pongs) a sample of one
 * in 17 keeps that out of the ratio and still gives thousands of records
 * per row. 17 is prime so that a repeating pattern of calls (a ping-pong
 * round is a write and an expectation, or a send and a receive) is sampled
 * at every position of it, not always at the same one. Paged and large
 * calls are few and long: all of them. */
static int trace_every(const struct bench_case *c)
{
	return c->op == OP_PAGED || (c->op == OP_SINGLE && c->bytes >= (256u << 10)) ? 1 : 17;
}

static void x_phase(void *ctx, int timed)
{
	struct xrun *r = ctx;
	if (timed) {
		drain_traces(r);
		r->timed = true;
		if (r->trace)
			xfer_engine_trace(r->x->e, trace_every(r->c));
	} else {
		xfer_engine_trace(r->x->e, 0);
		drain_traces(r); /* records precede their completions, so all are here */
		r->timed = false;
	}
}

static int x_post_single(void *ctx, uint64_t seq, uint32_t slot)
{
	struct xrun *r = ctx;
	uint64_t off = layout_slot_off(r->c, &r->l, seq);
	struct xfer_write w = {.src = r->mr, .src_off = off, .dst = r->rmr, .dst_off = off,
			       .len = r->c->bytes, .imm = IMM_PING(r->c), .flags = XFER_F_IMM};
	struct xfer_completion cpl = {.user_data = slot};
	return xfer_write(r->x->e, &w, &cpl);
}

static int x_post_paged(void *ctx, uint64_t seq, uint32_t slot)
{
	struct xrun *r = ctx;
	(void)seq;
	struct xfer_paged_write w = {.src = r->mr, .dst = r->rmr, .page_len = r->c->bytes,
				     .src_pages = r->l.sp, .src_stride = r->c->bytes,
				     .dst_pages = r->l.dp, .dst_stride = r->c->bytes,
				     .npages = r->c->pages, .imm = IMM_PING(r->c), .flags = XFER_F_IMM};
	struct xfer_completion cpl = {.user_data = slot};
	return xfer_write_paged(r->x->e, &w, &cpl);
}

static int x_reap(void *ctx, uint32_t *slots, int max)
{
	struct xrun *r = ctx;
	struct xfer_cqe c[64];
	int n = xfer_cq_wait(r->x->e, c, max < 64 ? max : 64, WAIT_MS);
	if (n == -ETIMEDOUT)
		return 0;
	for (int i = 0; i < n; i++) {
		if (c[i].res) {
			fprintf(stderr, "xfer-bench: xfer %s failed: %s\n", bench_op_name[r->c->op],
				xfer_strerror(c[i].res));
			return c[i].res;
		}
		if (c[i].user_data >= r->c->window) {
			fprintf(stderr, "xfer-bench: stray completion %llx\n",
				(unsigned long long)c[i].user_data);
			return -EPROTO;
		}
		slots[i] = (uint32_t)c[i].user_data;
	}
	if (r->timed)
		drain_traces(r);
	return n;
}

/* Reaps until `want` (a UD_ tag) shows up, with its result in *res; reaps
 * write completions on the way. */
static int x_wait_tag(struct xrun *r, uint64_t want, int *res)
{
	struct xfer_cqe c[16];
	uint64_t start = bench_now_ns();
	for (;;) {
		int n = xfer_cq_wait(r->x->e, c, 16, WAIT_MS);
		if (n == -ETIMEDOUT) {
			if (bench_now_ns() - start > (uint64_t)TARGET_WAIT_MS * 1000000ull)
				return -ETIMEDOUT;
			continue;
		}
		if (n < 0)
			return n;
		bool seen = false;
		for (int i = 0; i < n; i++) {
			if (c[i].user_data == UD_WRITE) {
				if (c[i].res)
					return c[i].res;
				r->writes_out--;
			} else if (c[i].user_data == want) {
				*res = c[i].res;
				seen = true;
			}
		}
		if (seen)
			return 0;
	}
}

/* XFER_BENCH_PP_BOOK=before: the ping-pongs' bookkeeping (the next
 * expectation, reaping, trace reads) before the ping, as the bench did
 * until 2026-12-02, for A/B runs in one build. */
static bool book_before(void)
{
	static int v = -1;
	if (v < 0) {
		const char *e = getenv("XFER_BENCH_PP_BOOK");
		v = e && !strcmp(e, "before");
	}
	return v;
}

/* The ping first, then the bookkeeping of the round, while the ping is on
 * its way: the next pong's expectation (arrivals before arming count, so
 * nothing can be missed) and the trace records. Before the ping they were
 * a second submission and a queue read on the round trip, which the raw
 * loop, polling its CQ for the immediate, does not have. */
static int x_ping_imm(void *ctx, uint64_t seq)
{
	struct xrun *r = ctx;
	(void)seq;
	struct xfer_completion cpl = {.user_data = UD_WRITE}, pong = {.user_data = UD_PONG};
	int ret = 0;
	if (book_before() && !r->armed && !(ret = xfer_expect_imm(r->x->e, IMM_PONG(r->c), 1, &pong)))
		r->armed = true;
	if (ret || (ret = xfer_write_imm(r->x->e, r->x->peer, IMM_PING(r->c), &cpl)))
		return ret;
	r->writes_out++;
	if (!r->armed && (ret = xfer_expect_imm(r->x->e, IMM_PONG(r->c), 1, &pong)))
		return ret;
	r->armed = true;
	if (r->timed && !book_before())
		drain_traces(r);
	return 0;
}

static int x_pong_imm(void *ctx)
{
	struct xrun *r = ctx;
	int res = 0, ret = x_wait_tag(r, UD_PONG, &res);
	if (!ret)
		r->armed = false;
	if (!ret && !res && r->timed && book_before())
		drain_traces(r);
	return ret ? ret : res;
}

static int x_drain_writes(struct xrun *r)
{
	struct xfer_cqe c[16];
	uint64_t start = bench_now_ns();
	while (r->writes_out) {
		int n = xfer_cq_wait(r->x->e, c, 16, WAIT_MS);
		if (n == -ETIMEDOUT && bench_now_ns() - start < (uint64_t)TARGET_WAIT_MS * 1000000ull)
			continue;
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			/* Only our writes matter here; a disarmed expectation
			 * completes with -ECANCELED on the way. */
			if (c[i].user_data != UD_WRITE)
				continue;
			if (c[i].res)
				return c[i].res;
			r->writes_out--;
		}
	}
	return 0;
}

static int x_stop_imm(void *ctx)
{
	struct xrun *r = ctx;
	uint32_t arrived;
	int res;
	/* A round that failed after its ping left its expectation armed:
	 * cancel it and reap the cancellation, so that nothing of this case
	 * is left in the queue. */
	if (r->armed) {
		int ret = xfer_imm_disarm(r->x->e, IMM_PONG(r->c), &arrived);
		if (!ret)
			ret = x_wait_tag(r, UD_PONG, &res);
		if (ret)
			return ret;
		r->armed = false;
	}
	struct xfer_completion cpl = {.user_data = UD_WRITE};
	int ret = xfer_write_imm(r->x->e, r->x->peer, IMM_STOP(r->c), &cpl);
	if (!ret)
		r->writes_out++;
	int dret = x_drain_writes(r);
	return ret ? ret : dret;
}

/* Non-blocking: reaps our SEND completions; the first failure, or 0. */
static int reap_sends(xfer_engine_t *e, uint64_t *out)
{
	struct xfer_cqe cq[16];
	int n = xfer_cq_poll(e, cq, 16), ret = 0;
	for (int i = 0; i < n; i++) {
		if (cq[i].user_data != UD_WRITE) {
			fprintf(stderr, "xfer-bench: stray completion %llx\n",
				(unsigned long long)cq[i].user_data);
			continue;
		}
		(*out)--;
		if (cq[i].res && !ret)
			ret = cq[i].res;
	}
	return ret;
}

static int x_send_msg(struct xrun *r, char tag)
{
	r->src[0] = (uint8_t)tag;
	struct xfer_completion cpl = {.user_data = UD_WRITE};
	int ret;
	/* The bounce buffers are few: a full engine answers -EAGAIN until reaped. */
	while ((ret = xfer_send(r->x->e, r->x->peer, r->src, r->c->bytes, &cpl)) == -EAGAIN)
		if ((ret = reap_sends(r->x->e, &r->writes_out)))
			return ret;
	if (!ret)
		r->writes_out++;
	return ret;
}

/* The ping first, then the round's bookkeeping while it travels (as in
 * x_ping_imm): the completions of earlier SENDs and the trace records. */
static int x_ping_send(void *ctx, uint64_t seq)
{
	struct xrun *r = ctx;
	(void)seq;
	int ret = x_send_msg(r, 'P');
	if (!ret && !book_before())
		ret = reap_sends(r->x->e, &r->writes_out);
	if (!ret && r->timed && !book_before())
		drain_traces(r);
	return ret;
}

static int x_pong_send(void *ctx)
{
	struct xrun *r = ctx;
	struct xfer_msg_info info;
	uint64_t start = bench_now_ns();
	int ret;
	while ((ret = xfer_recv_wait(r->x->e, r->rbuf, r->c->bytes, &info, WAIT_MS)) == -ETIMEDOUT)
		if (bench_now_ns() - start > (uint64_t)TARGET_WAIT_MS * 1000000ull)
			return -ETIMEDOUT;
	if (ret < 0)
		return ret;
	if (info.len != r->c->bytes)
		return -EPROTO;
	if (r->c->verify && pattern_check(r->rbuf + 1, 1, r->c->bytes - 1, r->c->seed) >= 0) {
		fprintf(stderr, "xfer-bench: verify: send reply payload differs\n");
		return -EILSEQ;
	}
	if (book_before() && (ret = reap_sends(r->x->e, &r->writes_out)))
		return ret;
	if (r->timed && book_before())
		drain_traces(r);
	return 0;
}

static int x_stop_send(void *ctx)
{
	struct xrun *r = ctx;
	int ret = x_send_msg(r, 'S');
	int dret = x_drain_writes(r);
	return ret ? ret : dret;
}

int xfer_init_case(struct xside *x, struct ctl *ctl, const struct bench_case *c,
		   const struct limits *lim, bool trace, struct meas *m)
{
	struct xrun r = {.x = x, .c = c, .m = m, .trace = trace};
	uint8_t desc[XFER_DESC_MAX];
	uint32_t dlen;
	if (c->telemetry != TEL_KEEP)
		xfer_engine_telemetry(x->e, c->telemetry == TEL_ON);
	int ret = layout_make(c, &r.l);
	if (ret)
		return ret;
	r.src = bench_alloc(r.l.src_len);
	if (c->op == OP_SEND)
		r.rbuf = bench_alloc(r.l.src_len);
	if (!r.src || (c->op == OP_SEND && !r.rbuf)) {
		ret = -ENOMEM;
		goto out;
	}
	pattern_fill(r.src, 0, r.l.src_len, c->seed);
	if ((ret = ctl_send(ctl, MSG_CASE, c, sizeof(*c))))
		goto out;
	if ((ret = ctl_expect(ctl, MSG_READY, desc, sizeof(desc), &dlen, TARGET_WAIT_MS)))
		goto out;
	struct xfer_stats st0, st1;
	xfer_engine_stats(x->e, &st0);
	if (c->op == OP_SINGLE || c->op == OP_PAGED) {
		if ((ret = xfer_mr_reg(x->e, r.src, r.l.src_len, &r.mr)) ||
		    (ret = xfer_rmr_import(x->e, x->peer, desc, dlen, &r.rmr)))
			goto fail;
	}
	uint64_t imms = 0;
	switch (c->op) {
	case OP_SINGLE:
	case OP_PAGED: {
		struct win_ops o = {.ctx = &r, .reap = x_reap, .phase = x_phase};
		o.post = c->op == OP_SINGLE ? x_post_single : x_post_paged;
		o.wrs_per_call = c->op == OP_SINGLE ? 1 : c->pages;
		o.bytes_per_call = c->bytes * o.wrs_per_call;
		ret = drive_window(&o, c->window, lim, m);
		imms = m->posted_all * o.wrs_per_call;
		break;
	}
	case OP_IMM: {
		struct pp_ops o = {.ctx = &r, .ping = x_ping_imm, .pong = x_pong_imm,
				   .stop = x_stop_imm, .phase = x_phase};
		ret = drive_pingpong(&o, lim, m);
		imms = m->posted_all + 1;
		break;
	}
	case OP_SEND: {
		struct pp_ops o = {.ctx = &r, .ping = x_ping_send, .pong = x_pong_send,
				   .stop = x_stop_send, .phase = x_phase, .bytes = c->bytes};
		ret = drive_pingpong(&o, lim, m);
		break;
	}
	}
fail:;
	/* The target always gets its END, so that it never waits forever. */
	struct ctl_result res = {0};
	int fret = case_finish(ctl, ret ? 0 : m->posted_all, ret ? 0 : imms, &res);
	if (!ret)
		ret = fret;
	m->verified = !ret && res.verified;
	xfer_engine_stats(x->e, &st1);
	m->sleeps[0] = st1.worker_sleeps - st0.worker_sleeps;
	m->sleeps[1] = res.sleeps;
	if (r.rmr)
		xfer_rmr_free(r.rmr);
	if (r.mr)
		xfer_mr_dereg(r.mr);
out:
	bench_free(r.src, r.l.src_len);
	bench_free(r.rbuf, r.l.src_len);
	layout_free(&r.l);
	return ret;
}

/* ---------------------------------------------------------------- target */

/* Waits for one completion: its tag in *ud and its result in *res. Fails
 * only when the initiator vanished or the engine broke. */
static int t_wait(xfer_engine_t *e, struct ctl *ctl, uint64_t *ud, int *res)
{
	struct xfer_cqe c;
	for (;;) {
		int n = xfer_cq_wait(e, &c, 1, WAIT_MS);
		if (n == 1) {
			*ud = c.user_data;
			*res = c.res;
			return 0;
		}
		if (n != -ETIMEDOUT)
			return n;
		if (ctl_readable(ctl))
			return -EPIPE; /* the initiator gave up or died mid-case */
	}
}

static int t_serve_imm(struct xside *x, struct ctl *ctl, const struct bench_case *c)
{
	struct xfer_completion ping = {.user_data = UD_PING}, stop = {.user_data = UD_STOP},
			       wr = {.user_data = UD_WRITE};
	uint64_t out = 0, ud = 0;
	uint32_t arrived;
	int res = 0;
	int ret = xfer_expect_imm(x->e, IMM_PING(c), 1, &ping);
	if (!ret)
		ret = xfer_expect_imm(x->e, IMM_STOP(c), 1, &stop);
	while (!ret) {
		if ((ret = t_wait(x->e, ctl, &ud, &res)) || (ret = res))
			break;
		if (ud == UD_WRITE) {
			out--;
		} else if (ud == UD_PING) {
			if ((ret = xfer_write_imm(x->e, x->peer, IMM_PONG(c), &wr)))
				break;
			out++;
			ret = xfer_expect_imm(x->e, IMM_PING(c), 1, &ping);
		} else if (ud == UD_STOP) {
			break;
		}
	}
	/* The ping expectation is armed again by now: cancel it and reap the
	 * cancellation with our last writes, leaving nothing for the next case. */
	bool armed = ret == 0;
	if (armed)
		ret = xfer_imm_disarm(x->e, IMM_PING(c), &arrived);
	while (!ret && (out || armed)) {
		if ((ret = t_wait(x->e, ctl, &ud, &res)))
			break;
		if (ud == UD_WRITE) {
			out--;
			ret = res;
		} else if (ud == UD_PING) {
			armed = false;
		}
	}
	return ret;
}

static int t_serve_send(struct xside *x, struct ctl *ctl, const struct bench_case *c)
{
	uint8_t *buf = bench_alloc(c->bytes), *reply = bench_alloc(c->bytes);
	struct xfer_completion wr = {.user_data = UD_WRITE};
	struct xfer_msg_info info;
	uint64_t out = 0;
	int ret = buf && reply ? 0 : -ENOMEM;
	if (reply)
		pattern_fill(reply, 0, c->bytes, c->seed);
	while (!ret) {
		ret = xfer_recv_wait(x->e, buf, c->bytes, &info, WAIT_MS);
		if (ret == -ETIMEDOUT) {
			ret = ctl_readable(ctl) ? -EPIPE : 0;
			continue;
		}
		if (ret < 0)
			break;
		ret = 0;
		if (info.len != c->bytes) {
			ret = -EPROTO;
			break;
		}
		if (buf[0] == 'S')
			break;
		if (c->verify && pattern_check(buf + 1, 1, c->bytes - 1, c->seed) >= 0) {
			fprintf(stderr, "xfer-bench: verify: send payload differs\n");
			ret = -EILSEQ;
			break;
		}
		reply[0] = 'R';
		while ((ret = xfer_send(x->e, x->peer, reply, c->bytes, &wr)) == -EAGAIN)
			reap_sends(x->e, &out);
		if (!ret)
			out++;
		int rret = reap_sends(x->e, &out);
		if (!ret)
			ret = rret;
	}
	uint64_t ud;
	int res;
	while (!ret && out) {
		if ((ret = t_wait(x->e, ctl, &ud, &res)) || (ret = res))
			break;
		if (ud == UD_WRITE)
			out--;
	}
	bench_free(buf, c->bytes);
	bench_free(reply, c->bytes);
	return ret;
}

int xfer_target_case(struct xside *x, struct ctl *ctl, const struct bench_case *c)
{
	struct layout l;
	uint8_t desc[XFER_DESC_MAX];
	xfer_mr_t *mr = NULL;
	uint8_t *dst = NULL;
	if (c->telemetry != TEL_KEEP)
		xfer_engine_telemetry(x->e, c->telemetry == TEL_ON);
	int ret = layout_make(c, &l), n = 0, verified = 0;
	if (!ret && (c->op == OP_SINGLE || c->op == OP_PAGED)) {
		dst = bench_alloc(l.dst_len);
		ret = dst ? xfer_mr_reg(x->e, dst, l.dst_len, &mr) : -ENOMEM;
		if (!ret && (n = xfer_mr_desc(mr, desc, sizeof(desc), NULL)) < 0)
			ret = n;
	}
	/* READY goes out even on failure: the initiator then fails the case. */
	int sret = ctl_send(ctl, MSG_READY, desc, ret ? 0 : (uint32_t)n);
	if (ret || sret) {
		struct ctl_end end;
		if (!sret && !case_wait_end(ctl, &end))
			case_reply(ctl, ret, 0, "target could not set up");
		goto out;
	}
	struct xfer_stats st0, st1;
	xfer_engine_stats(x->e, &st0);
	if (c->op == OP_IMM)
		ret = t_serve_imm(x, ctl, c);
	else if (c->op == OP_SEND)
		ret = t_serve_send(x, ctl, c);
	struct ctl_end end;
	int eret = case_wait_end(ctl, &end);
	if (eret) {
		ret = eret;
		goto out;
	}
	if (!ret && (c->op == OP_SINGLE || c->op == OP_PAGED) && end.imms) {
		/* Every immediate must have arrived: counted, not assumed. */
		struct xfer_completion cpl = {.user_data = UD_PING, .timeout_ms = 30000};
		uint64_t ud, left = end.imms;
		int res = 0;
		while (!ret && left) {
			uint32_t n32 = left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
			ret = xfer_expect_imm(x->e, IMM_PING(c), n32, &cpl);
			if (!ret && !(ret = t_wait(x->e, ctl, &ud, &res)))
				ret = res;
			left -= n32;
		}
		if (ret)
			fprintf(stderr, "xfer-bench: target: %llu immediates expected: %s\n",
				(unsigned long long)end.imms, xfer_strerror(ret));
	}
	if (!ret && c->verify && dst) {
		ret = verify_dst(c, &l, dst, end.calls);
		verified = !ret;
	} else if (!ret && c->verify) {
		verified = 1; /* send payloads were checked as they arrived */
	}
	xfer_engine_stats(x->e, &st1);
	case_reply_sleeps(ctl, ret, verified, st1.worker_sleeps - st0.worker_sleeps,
			  ret ? bench_strerror(ret) : "");
out:
	if (mr)
		xfer_mr_dereg(mr);
	bench_free(dst, l.dst_len);
	layout_free(&l);
	return ret;
}
