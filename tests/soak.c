/* xfer-soak: random single writes, paged writes, immediate-only writes and
 * SENDs between two processes for a given time, every byte checked at the
 * target through a plan both sides derive from the round number. Reports
 * operations, bytes and errors; exits non-zero if anything was lost or
 * corrupted.  Usage: xfer-soak SECONDS  (provider from XFER_TEST_PROVIDER) */
#include <string.h>
#include <time.h>

#include "helpers.h"

#define REGION (64u << 20)
#define MAXOPS 16

enum kind { K_SINGLE, K_PAGED, K_IMM, K_SEND };

struct plan_op {
	enum kind kind;
	uint64_t dst_off, len, src_seed;
	uint32_t pages, page_len;
};

struct plan {
	int n;
	uint32_t imms, sends;
	struct plan_op op[MAXOPS];
};

/* Both sides compute the same plan: destinations never overlap within a
 * round, so the result does not depend on the order things land. */
static void make_plan(uint64_t round, struct plan *p)
{
	uint64_t s = round * 7919 + 1, off = 0;
	memset(p, 0, sizeof(*p));
	p->n = 1 + (int)(t_rand(&s) % MAXOPS);
	for (int i = 0; i < p->n; i++) {
		struct plan_op *o = &p->op[i];
		o->kind = (enum kind)(t_rand(&s) % 4);
		o->src_seed = t_rand(&s);
		o->dst_off = off;
		switch (o->kind) {
		case K_SINGLE:
			o->len = 1 + t_rand(&s) % (2u << 20);
			p->imms++;
			break;
		case K_PAGED:
			o->page_len = 64u << (t_rand(&s) % 7);
			o->pages = 1 + (uint32_t)(t_rand(&s) % 200);
			o->len = (uint64_t)o->page_len * o->pages;
			p->imms += o->pages;
			break;
		case K_IMM:
			p->imms++;
			break;
		case K_SEND:
			o->len = t_rand(&s) % 4096;
			p->sends++;
			break;
		}
		off += (o->len + 63) & ~63ull;
	}
}

static int initiator(int idx, int fd, void *arg)
{
	(void)idx;
	double seconds = *(double *)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peer = t_connect(e, fd);
	uint8_t *src = malloc(REGION);
	CHECK(src);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, src, REGION, &mr));
	xfer_rmr_t *dst = t_recv_rmr(e, peer, fd);
	static uint32_t pages[200];
	for (uint32_t i = 0; i < 200; i++)
		pages[i] = i;
	uint64_t ops = 0, bytes = 0, errors = 0, rounds = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t round = 1;; round++) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9 > seconds) {
			t_send_u64(fd, 0);
			break;
		}
		struct plan p;
		make_plan(round, &p);
		t_send_u64(fd, round);
		CHECK(t_recv_u64(fd) == round); /* armed */
		uint32_t imm = (uint32_t)round;
		for (int i = 0; i < p.n; i++) {
			struct plan_op *o = &p.op[i];
			uint8_t *s = src + o->dst_off; /* same layout on both sides */
			t_fill(s, o->len, o->src_seed);
			struct xfer_completion c = {.user_data = (uint64_t)i};
			int rc;
			do {
				switch (o->kind) {
				case K_SINGLE: {
					struct xfer_write w = {.src = mr, .src_off = o->dst_off, .dst = dst,
							       .dst_off = o->dst_off, .len = o->len, .imm = imm,
							       .flags = XFER_F_IMM};
					rc = xfer_write(e, &w, &c);
					break;
				}
				case K_PAGED: {
					struct xfer_paged_write w = {
						.src = mr, .dst = dst, .page_len = o->page_len, .src_pages = pages,
						.src_stride = o->page_len, .src_base = o->dst_off,
						.dst_pages = pages, .dst_stride = o->page_len,
						.dst_base = o->dst_off, .npages = o->pages, .imm = imm,
						.flags = XFER_F_IMM};
					rc = xfer_write_paged(e, &w, &c);
					break;
				}
				case K_IMM:
					rc = xfer_write_imm(e, peer, imm, &c);
					break;
				default:
					rc = xfer_send(e, peer, s, o->len, &c);
				}
			} while (rc == -EAGAIN);
			CHECK_OK(rc);
			bytes += o->len;
		}
		for (int i = 0; i < p.n; i++) {
			struct xfer_cqe cqe = t_wait_cqe(e, 30000);
			if (cqe.res)
				errors++;
		}
		ops += (uint64_t)p.n;
		uint64_t verdict = t_recv_u64(fd);
		if (verdict != round) {
			fprintf(stderr, "round %llu: target found corruption or loss\n", (unsigned long long)round);
			errors++;
			t_send_u64(fd, 0);
			break;
		}
		rounds++;
	}
	printf("soak %s: %llu rounds, %llu operations, %llu bytes, %llu errors\n", t_provider(),
	       (unsigned long long)rounds, (unsigned long long)ops, (unsigned long long)bytes,
	       (unsigned long long)errors);
	xfer_rmr_free(dst);
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	free(src);
	return errors ? 1 : 0;
}

static int target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	(void)t_connect(e, fd);
	uint8_t *dst = malloc(REGION), *want = malloc(REGION);
	CHECK(dst && want);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, dst, REGION, &mr));
	t_send_desc(fd, mr);
	uint64_t lost = 0, corrupt = 0;
	for (;;) {
		uint64_t round = t_recv_u64(fd);
		if (round == 0)
			break;
		struct plan p;
		make_plan(round, &p);
		struct xfer_completion c = {.user_data = round, .timeout_ms = 30000};
		if (p.imms)
			CHECK_OK(xfer_expect_imm(e, (uint32_t)round, p.imms, &c));
		t_send_u64(fd, round);
		if (p.imms) {
			struct xfer_cqe cqe = t_wait_cqe(e, 35000);
			if (cqe.res) {
				lost++;
				t_send_u64(fd, 0);
				continue;
			}
		}
		uint8_t msg[4096];
		for (uint32_t k = 0; k < p.sends; k++) {
			struct xfer_msg_info info;
			if (xfer_recv_wait(e, msg, sizeof(msg), &info, 30000) != 1) {
				lost++;
				break;
			}
			int found = 0;
			for (int i = 0; i < p.n && !found; i++) {
				struct plan_op *o = &p.op[i];
				if (o->kind != K_SEND || o->len != info.len)
					continue;
				t_fill(want, o->len, o->src_seed);
				found = memcmp(msg, want, o->len) == 0;
			}
			corrupt += !found;
		}
		for (int i = 0; i < p.n; i++) {
			struct plan_op *o = &p.op[i];
			if (o->kind != K_SINGLE && o->kind != K_PAGED)
				continue;
			t_fill(want, o->len, o->src_seed);
			corrupt += memcmp(dst + o->dst_off, want, o->len) != 0;
		}
		t_send_u64(fd, lost || corrupt ? 0 : round);
	}
	printf("soak target: %llu lost, %llu corrupted\n", (unsigned long long)lost,
	       (unsigned long long)corrupt);
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	free(dst);
	free(want);
	return lost || corrupt ? 1 : 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 60;
	return t_run_pair(initiator, target, &seconds);
}
