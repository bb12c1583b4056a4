/* The raw libfabric loops: what an application posting fi_writedata itself,
 * from one busy-polling thread, gets out of the same provider. Progress is
 * manual on every provider here, so the target polls its CQ throughout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "bench_raw.h"

#define POLL_BATCH 64
#define STUCK_NS 30000000000ull

/* One posted request; the provider's context must come first. */
struct wrctx {
	struct fi_context2 fi;
	uint32_t call;
	struct wrctx *next;
};

struct rcall {
	uint32_t next_page, done, total;
	uint32_t nic_base;
	uint64_t seq;
};

struct rrun {
	struct rside *r;
	const struct bench_case *c;
	struct layout l;
	uint8_t *src;
	struct raw_mr mr;
	struct raw_rkey rkey[RAW_NIC_MAX];
	struct wrctx *wrs, *free_wrs;
	struct rcall *calls;
	uint32_t *pending; /* slots of calls not fully posted, FIFO */
	uint32_t pend_head, pend_count;
	struct meas *m;             /* raw_post: the sampled post calls */
	uint32_t posts;             /* write posts so far, for the sampling */
	bool trace;                 /* sample at all (not under --no-trace) */
	struct fi_context2 ctl_ctx; /* zero-length writes and sends */
	uint64_t out;               /* those not yet completed */
	bool pong;                  /* the awaited reply arrived */
};

/* tcp;ofi_rxm reports REMOTE_WRITE|REMOTE_CQ_DATA, shm REMOTE_CQ_DATA alone. */
static inline bool is_remote_write(uint64_t flags)
{
	return (flags & FI_REMOTE_WRITE) || ((flags & FI_REMOTE_CQ_DATA) && !(flags & FI_RECV));
}

static int read_err(struct raw_nic *n)
{
	struct fi_cq_err_entry err = {0};
	if (fi_cq_readerr(n->cq, &err, 0) != 1)
		return 0;
	fprintf(stderr, "xfer-bench: raw: completion error: %s (prov %d)\n", fi_strerror(err.err),
		err.prov_errno);
	return err.err ? -(int)err.err : -EIO;
}

/* ------------------------------------------------------- windowed writes */

static int post_page(struct rrun *rr, uint32_t slot)
{
	struct rcall *k = &rr->calls[slot];
	const struct bench_case *c = rr->c;
	uint32_t i = k->next_page;
	unsigned ni = (k->nic_base + i) % rr->r->n;
	struct raw_nic *n = &rr->r->nic[ni];
	uint64_t soff, doff;
	if (c->op == OP_PAGED) {
		soff = (uint64_t)rr->l.sp[i] * c->bytes;
		doff = (uint64_t)rr->l.dp[i] * c->bytes;
	} else {
		soff = doff = layout_slot_off(c, &rr->l, k->seq);
	}
	struct wrctx *w = rr->free_wrs;
	if (!w)
		return -EAGAIN;
	w->call = slot;
	bool timed = rr->trace && rr->posts % RAW_POST_EVERY == 0;
	uint64_t t0 = timed ? bench_now_ns() : 0;
	ssize_t ret = fi_writedata(n->ep, rr->src + soff, c->bytes, rr->mr.desc[ni], IMM_PING(c),
				   n->peer, rr->rkey[ni].base + doff, rr->rkey[ni].key, &w->fi);
	if (ret == -FI_EAGAIN)
		return -EAGAIN;
	if (ret)
		return raw_errno(ret);
	if (timed)
		samples_add(&rr->m->raw_post, bench_now_ns() - t0);
	rr->posts++;
	rr->free_wrs = w->next;
	k->next_page++;
	return 0;
}

/* Posts what the send queues take, oldest call first. */
static int pump(struct rrun *rr)
{
	while (rr->pend_count) {
		uint32_t slot = rr->pending[rr->pend_head];
		struct rcall *k = &rr->calls[slot];
		while (k->next_page < k->total) {
			int ret = post_page(rr, slot);
			if (ret == -EAGAIN)
				return 0;
			if (ret)
				return ret;
		}
		rr->pend_head = (rr->pend_head + 1) % rr->c->window;
		rr->pend_count--;
	}
	return 0;
}

static int r_post(void *ctx, uint64_t seq, uint32_t slot)
{
	struct rrun *rr = ctx;
	rr->calls[slot] = (struct rcall){.total = rr->c->op == OP_PAGED ? rr->c->pages : 1,
					 .nic_base = (uint32_t)(seq % rr->r->n), .seq = seq};
	rr->pending[(rr->pend_head + rr->pend_count) % rr->c->window] = slot;
	rr->pend_count++;
	return pump(rr);
}

static int r_reap(void *ctx, uint32_t *slots, int max)
{
	struct rrun *rr = ctx;
	struct fi_cq_data_entry e[POLL_BATCH];
	uint64_t start = bench_now_ns();
	int got = 0;
	for (uint64_t spins = 0;; spins++) {
		for (unsigned ni = 0; ni < rr->r->n; ni++) {
			ssize_t n = fi_cq_read(rr->r->nic[ni].cq, e, POLL_BATCH);
			if (n == -FI_EAVAIL)
				return read_err(&rr->r->nic[ni]);
			if (n < 0 && n != -FI_EAGAIN)
				return raw_errno(n);
			for (ssize_t i = 0; i < n; i++) {
				if (is_remote_write(e[i].flags) || (e[i].flags & FI_RECV))
					continue;
				struct wrctx *w = (struct wrctx *)e[i].op_context;
				struct rcall *k = &rr->calls[w->call];
				w->next = rr->free_wrs;
				rr->free_wrs = w;
				if (++k->done == k->total && got < max)
					slots[got++] = w->call;
			}
		}
		int ret = pump(rr);
		if (ret)
			return ret;
		if (got)
			return got;
		if ((spins & 1023) == 1023 && bench_now_ns() - start > 1000000000ull)
			return 0;
	}
}

/* ------------------------------------------------------------- ping-pongs */

static ssize_t post_imm(struct rside *r, uint32_t imm, void *ctx)
{
	struct raw_nic *n = &r->nic[0];
	/* As the engine does: zero-length, transmit-complete (shm 1.17 never
	 * completes a zero-length write that asks for delivery-complete). */
	struct iovec iov = {.iov_base = r->sink, .iov_len = 0};
	struct fi_rma_iov rma = {.addr = n->peer_sink.base, .len = 0, .key = n->peer_sink.key};
	void *desc = fi_mr_desc(n->sink_mr);
	struct fi_msg_rma msg = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = n->peer,
				 .rma_iov = &rma, .rma_iov_count = 1, .context = ctx, .data = imm};
	return fi_writemsg(n->ep, &msg, FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_REMOTE_CQ_DATA);
}

static ssize_t post_send(struct rside *r, size_t len, void *ctx)
{
	struct raw_nic *n = &r->nic[0];
	return fi_send(n->ep, raw_send_buf(r), len, fi_mr_desc(n->msg_mr), n->peer, ctx);
}

/* One pass over NIC 0's CQ: counts our completions, notes replies. `want`
 * is the immediate awaited (imm ping-pong) or 0 for a received message,
 * whose slot lands in *slot. */
static int poll_once(struct rside *r, uint64_t *out, uint32_t want, bool *seen, int *slot)
{
	struct raw_nic *n = &r->nic[0];
	struct fi_cq_data_entry e[16];
	ssize_t got = fi_cq_read(n->cq, e, 16);
	if (got == -FI_EAVAIL)
		return read_err(n);
	if (got < 0)
		return got == -FI_EAGAIN ? 0 : raw_errno(got);
	for (ssize_t i = 0; i < got; i++) {
		if (is_remote_write(e[i].flags)) {
			if (want && (uint32_t)e[i].data == want)
				*seen = true;
		} else if (e[i].flags & FI_RECV) {
			*seen = true;
			*slot = (int)((struct fi_context2 *)e[i].op_context - r->recv_ctx);
		} else {
			(*out)--;
		}
	}
	return 0;
}

static int wait_reply(struct rside *r, uint64_t *out, uint32_t want, int *slot)
{
	bool seen = false;
	uint64_t start = bench_now_ns();
	for (uint64_t spins = 0; !seen; spins++) {
		int ret = poll_once(r, out, want, &seen, slot);
		if (ret)
			return ret;
		if ((spins & 4095) == 4095 && bench_now_ns() - start > STUCK_NS)
			return -ETIMEDOUT;
	}
	return 0;
}

static int drain_out(struct rside *r, uint64_t *out)
{
	bool seen;
	int slot;
	uint64_t start = bench_now_ns();
	while (*out) {
		int ret = poll_once(r, out, 0, &seen, &slot);
		if (ret)
			return ret;
		if (bench_now_ns() - start > STUCK_NS)
			return -ETIMEDOUT;
	}
	return 0;
}

typedef ssize_t (*raw_post_fn)(struct rside *r, uint32_t arg, void *ctx);

/* Posts, polling (which is what frees provider resources) while it is full. */
static int retry_post(struct rside *r, uint64_t *out, raw_post_fn post, uint32_t arg, void *ctx)
{
	ssize_t ret;
	bool seen;
	int slot;
	while ((ret = post(r, arg, ctx)) == -FI_EAGAIN)
		poll_once(r, out, 0, &seen, &slot);
	if (!ret)
		(*out)++;
	return raw_errno(ret);
}

static ssize_t post_send_u32(struct rside *r, uint32_t len, void *ctx)
{
	return post_send(r, len, ctx);
}

static int r_ping_imm(void *ctx, uint64_t seq)
{
	struct rrun *rr = ctx;
	(void)seq;
	return retry_post(rr->r, &rr->out, post_imm, IMM_PING(rr->c), &rr->ctl_ctx);
}

static int r_pong_imm(void *ctx)
{
	struct rrun *rr = ctx;
	int slot;
	return wait_reply(rr->r, &rr->out, IMM_PONG(rr->c), &slot);
}

static int r_stop_imm(void *ctx)
{
	struct rrun *rr = ctx;
	int ret = retry_post(rr->r, &rr->out, post_imm, IMM_STOP(rr->c), &rr->ctl_ctx);
	int dret = drain_out(rr->r, &rr->out);
	return ret ? ret : dret;
}

static int r_send_tagged(struct rrun *rr, char tag)
{
	raw_send_buf(rr->r)[0] = (uint8_t)tag;
	return retry_post(rr->r, &rr->out, post_send_u32, (uint32_t)rr->c->bytes, &rr->ctl_ctx);
}

static int r_ping_send(void *ctx, uint64_t seq)
{
	(void)seq;
	return r_send_tagged(ctx, 'P');
}

static int r_pong_send(void *ctx)
{
	struct rrun *rr = ctx;
	int slot = -1;
	int ret = wait_reply(rr->r, &rr->out, 0, &slot);
	if (ret)
		return ret;
	const uint8_t *b = raw_recv_buf(rr->r, (unsigned)slot);
	if (rr->c->verify && pattern_check(b + 1, 1, rr->c->bytes - 1, rr->c->seed) >= 0) {
		fprintf(stderr, "xfer-bench: verify: raw send reply payload differs\n");
		return -EILSEQ;
	}
	return raw_post_recv(rr->r, (unsigned)slot);
}

static int r_stop_send(void *ctx)
{
	struct rrun *rr = ctx;
	int ret = r_send_tagged(rr, 'S');
	int dret = drain_out(rr->r, &rr->out);
	return ret ? ret : dret;
}

/* --------------------------------------------------------------- initiator */

static int parse_ready(struct rrun *rr, const uint8_t *blob, uint32_t len)
{
	if (len != rr->r->n * sizeof(struct raw_rkey))
		return -EPROTO;
	memcpy(rr->rkey, blob, len);
	return 0;
}

int raw_init_case(struct rside *r, struct ctl *ctl, const struct bench_case *c,
		  const struct limits *lim, bool trace, struct meas *m)
{
	struct rrun rr = {.r = r, .c = c, .m = m, .trace = trace};
	uint8_t blob[RAW_NIC_MAX * sizeof(struct raw_rkey)];
	uint32_t len;
	bool windowed = c->op == OP_SINGLE || c->op == OP_PAGED;
	int ret = layout_make(c, &rr.l);
	if (ret)
		return ret;
	rr.src = bench_alloc(rr.l.src_len);
	size_t nwr = 0;
	for (unsigned i = 0; i < r->n; i++)
		nwr += r->nic[i].tx_size;
	if (windowed) {
		rr.wrs = calloc(nwr, sizeof(*rr.wrs));
		rr.calls = calloc(c->window, sizeof(*rr.calls));
		rr.pending = calloc(c->window, sizeof(*rr.pending));
	}
	if (!rr.src || (windowed && (!rr.wrs || !rr.calls || !rr.pending))) {
		ret = -ENOMEM;
		goto out;
	}
	/* As many requests in flight as the engine allows itself: its credits
	 * are the provider's tx queue sizes. */
	for (size_t i = windowed ? nwr : 0; i-- > 0;) {
		rr.wrs[i].next = rr.free_wrs;
		rr.free_wrs = &rr.wrs[i];
	}
	pattern_fill(rr.src, 0, rr.l.src_len, c->seed);
	if (c->op == OP_SEND)
		pattern_fill(raw_send_buf(r), 0, c->bytes, c->seed);
	if ((ret = ctl_send(ctl, MSG_CASE, c, sizeof(*c))))
		goto out;
	if ((ret = ctl_expect(ctl, MSG_READY, blob, sizeof(blob), &len, 60000)))
		goto out;
	if (windowed && (!(ret = parse_ready(&rr, blob, len))))
		ret = raw_mr_reg(r, rr.src, rr.l.src_len, &rr.mr);
	uint64_t imms = 0;
	if (!ret) {
		switch (c->op) {
		case OP_SINGLE:
		case OP_PAGED: {
			struct win_ops o = {.ctx = &rr, .post = r_post, .reap = r_reap};
			o.wrs_per_call = c->op == OP_SINGLE ? 1 : c->pages;
			o.bytes_per_call = c->bytes * o.wrs_per_call;
			ret = drive_window(&o, c->window, lim, m);
			imms = m->posted_all * o.wrs_per_call;
			break;
		}
		case OP_IMM: {
			struct pp_ops o = {.ctx = &rr, .ping = r_ping_imm, .pong = r_pong_imm,
					   .stop = r_stop_imm};
			ret = drive_pingpong(&o, lim, m);
			break;
		}
		case OP_SEND: {
			struct pp_ops o = {.ctx = &rr, .ping = r_ping_send, .pong = r_pong_send,
					   .stop = r_stop_send, .bytes = c->bytes};
			ret = drive_pingpong(&o, lim, m);
			break;
		}
		}
	}
	struct ctl_result res = {0};
	int fret = case_finish(ctl, ret ? 0 : m->posted_all, ret ? 0 : imms, &res);
	if (!ret)
		ret = fret;
	m->verified = !ret && res.verified;
	raw_mr_dereg(r, &rr.mr);
out:
	bench_free(rr.src, rr.l.src_len);
	free(rr.wrs);
	free(rr.calls);
	free(rr.pending);
	layout_free(&rr.l);
	return ret;
}

/* ------------------------------------------------------------------ target */

/* Polls every CQ until END arrived and `imms` writes with our immediate
 * landed. Without this polling nothing would land at all. */
static int t_serve_writes(struct rside *r, struct ctl *ctl, const struct bench_case *c,
			  struct ctl_end *end)
{
	struct fi_cq_data_entry e[POLL_BATCH];
	uint64_t got = 0, t_end = 0;
	bool ended = false;
	for (uint64_t spins = 0;; spins++) {
		for (unsigned ni = 0; ni < r->n; ni++) {
			ssize_t n = fi_cq_read(r->nic[ni].cq, e, POLL_BATCH);
			if (n == -FI_EAVAIL)
				return read_err(&r->nic[ni]);
			for (ssize_t i = 0; i < n; i++)
				if (is_remote_write(e[i].flags) && (uint32_t)e[i].data == IMM_PING(c))
					got++;
		}
		if (ended && got >= end->imms)
			return got == end->imms ? 0 : -EPROTO;
		if ((spins & 255) != 255)
			continue;
		if (!ended && ctl_readable(ctl)) {
			int ret = case_wait_end(ctl, end);
			if (ret)
				return ret;
			ended = true;
			t_end = bench_now_ns();
		} else if (ended && bench_now_ns() - t_end > STUCK_NS) {
			fprintf(stderr, "xfer-bench: raw target: %llu of %llu immediates arrived\n",
				(unsigned long long)got, (unsigned long long)end->imms);
			return -ETIMEDOUT;
		}
	}
}

/* Answers pings until the stop, then keeps polling (the initiator's last
 * completions may need our progress) until END arrives. */
static int t_serve_pingpong(struct rside *r, struct ctl *ctl, const struct bench_case *c,
			    struct ctl_end *end)
{
	struct raw_nic *n = &r->nic[0];
	struct fi_context2 ctx;
	uint64_t out = 0;
	bool stopped = false;
	int ret = 0;
	if (c->op == OP_SEND)
		pattern_fill(raw_send_buf(r), 0, c->bytes, c->seed);
	for (uint64_t spins = 0;; spins++) {
		struct fi_cq_data_entry e[16];
		ssize_t got = fi_cq_read(n->cq, e, 16);
		if (got == -FI_EAVAIL)
			return read_err(n);
		for (ssize_t i = 0; i < got && !ret; i++) {
			if (is_remote_write(e[i].flags)) {
				if ((uint32_t)e[i].data == IMM_STOP(c))
					stopped = true;
				else if ((uint32_t)e[i].data == IMM_PING(c))
					ret = retry_post(r, &out, post_imm, IMM_PONG(c), &ctx);
			} else if (e[i].flags & FI_RECV) {
				unsigned s = (unsigned)((struct fi_context2 *)e[i].op_context - r->recv_ctx);
				const uint8_t *b = raw_recv_buf(r, s);
				if (b[0] == 'S') {
					stopped = true;
				} else {
					if (c->verify && pattern_check(b + 1, 1, c->bytes - 1, c->seed) >= 0) {
						fprintf(stderr, "xfer-bench: verify: raw send payload differs\n");
						ret = -EILSEQ;
					}
					raw_send_buf(r)[0] = 'R';
					if (!ret)
						ret = retry_post(r, &out, post_send_u32, (uint32_t)c->bytes, &ctx);
				}
				if (!ret)
					ret = raw_post_recv(r, s);
			} else {
				out--;
			}
		}
		if (ret)
			return ret;
		if ((spins & 255) == 255 && ctl_readable(ctl)) {
			/* END (normally after the stop; early if the initiator failed). */
			if ((ret = case_wait_end(ctl, end)))
				return ret;
			if (!stopped)
				return -ECANCELED;
			return drain_out(r, &out);
		}
	}
}

int raw_target_case(struct rside *r, struct ctl *ctl, const struct bench_case *c)
{
	struct layout l;
	struct raw_mr mr = {0};
	uint8_t *dst = NULL;
	bool windowed = c->op == OP_SINGLE || c->op == OP_PAGED;
	int ret = layout_make(c, &l), verified = 0;
	if (!ret && windowed) {
		dst = bench_alloc(l.dst_len);
		ret = dst ? raw_mr_reg(r, dst, l.dst_len, &mr) : -ENOMEM;
	}
	struct raw_rkey rk[RAW_NIC_MAX];
	for (unsigned i = 0; i < r->n; i++)
		rk[i] = mr.rkey[i];
	int sret = ctl_send(ctl, MSG_READY, rk, windowed && !ret ? r->n * (uint32_t)sizeof(rk[0]) : 0);
	/* calls == UINT64_MAX: END not read yet (the initiator never sends it). */
	struct ctl_end end = {.calls = UINT64_MAX};
	if (sret) {
		ret = sret;
		goto out;
	}
	if (ret) {
		if (!case_wait_end(ctl, &end))
			case_reply(ctl, ret, 0, "raw target could not set up");
		goto out;
	}
	ret = windowed ? t_serve_writes(r, ctl, c, &end) : t_serve_pingpong(r, ctl, c, &end);
	if (end.calls == UINT64_MAX && case_wait_end(ctl, &end))
		goto out;
	if (!ret && c->verify) {
		ret = windowed ? verify_dst(c, &l, dst, end.calls) : 0;
		verified = !ret;
	}
	case_reply(ctl, ret, verified, ret ? bench_strerror(ret) : "");
out:
	raw_mr_dereg(r, &mr);
	bench_free(dst, l.dst_len);
	layout_free(&l);
	return ret;
}
