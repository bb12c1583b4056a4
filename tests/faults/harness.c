#include "harness.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ms_since(uint64_t start)
{
	return (mono_ns() - start) / 1000000ull;
}

void reap_exactly(xfer_engine_t *e, uint64_t base, uint32_t n, int32_t *res, uint64_t timeout_ms)
{
	unsigned char *seen = calloc(n, 1);
	CHECK(seen);
	timeout_ms *= t_time_scale();
	uint64_t start = mono_ns();
	for (uint32_t got = 0; got < n;) {
		uint64_t spent = ms_since(start);
		CHECK(spent < timeout_ms);
		struct xfer_cqe c[32];
		int k = xfer_cq_wait(e, c, 32, timeout_ms - spent);
		CHECK(k > 0);
		for (int i = 0; i < k; i++) {
			CHECK(c[i].user_data >= base && c[i].user_data < base + n);
			CHECK(seen[c[i].user_data - base]++ == 0);
			if (res)
				res[c[i].user_data - base] = c[i].res;
		}
		got += (uint32_t)k;
	}
	free(seen);
}

void reap_none(xfer_engine_t *e, uint64_t ms)
{
	struct xfer_cqe c;
	int k = xfer_cq_wait(e, &c, 1, ms);
	if (k != -ETIMEDOUT) {
		fprintf(stderr, "unexpected completion: user_data %llu res %d\n",
			(unsigned long long)c.user_data, c.res);
		exit(1);
	}
}

void check_guards(const struct fault_target *t)
{
	for (size_t i = 0; i < F_GUARD; i++) {
		CHECK(t->buf[i] == F_GUARD_BYTE);
		CHECK(t->buf[F_GUARD + F_REGION + i] == F_GUARD_BYTE);
	}
}

/* -------------------------------------------------------------- stable peer */

#define STABLE_IMM 0x5ab1e
#define STABLE_LEN 65536u

void stable_check(struct fault_init *f)
{
	uint32_t round = ++f->stable_round;
	t_fill(f->src_buf, STABLE_LEN, 1000 + round);
	t_send_u64(f->fd_s, round);
	CHECK(t_recv_u64(f->fd_s) == round); /* armed */
	struct xfer_write w = {.src = f->src, .dst = f->s_rmr, .len = STABLE_LEN, .imm = STABLE_IMM,
			       .flags = XFER_F_IMM};
	struct xfer_completion c = {.user_data = 0xfeed0000u + round, .timeout_ms = 10000};
	CHECK_OK(xfer_write(f->e, &w, &c));
	struct xfer_cqe cqe;
	/* Other completions of the case may be queued; look for ours. */
	uint64_t start = mono_ns();
	for (;;) {
		CHECK(ms_since(start) < 10000);
		CHECK(xfer_cq_wait(f->e, &cqe, 1, 10000) == 1);
		if (cqe.user_data == 0xfeed0000u + round)
			break;
		fprintf(stderr, "stable_check: skipping completion %llu (%d) of the case\n",
			(unsigned long long)cqe.user_data, cqe.res);
	}
	CHECK_RC(cqe.res, 0);
	CHECK(t_recv_u64(f->fd_s) == round); /* verified */
}

static const struct fault_case *the_case;

static int stable_main(int fd)
{
	struct xfer_attr a;
	t_attr(&a);
	if (the_case->tweak_attr)
		the_case->tweak_attr(&a, 2);
	xfer_engine_t *e = t_engine(&a);
	(void)t_connect(e, fd);
	uint8_t *buf = malloc(STABLE_LEN), *want = malloc(STABLE_LEN);
	CHECK(buf && want);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, buf, STABLE_LEN, &mr));
	t_send_desc(fd, mr);
	for (uint32_t round = 1;; round++) {
		uint64_t cmd = t_recv_u64(fd);
		if (cmd == 0)
			break;
		if (cmd == F_STABLE_HOOK) {
			CHECK(the_case->stable);
			CHECK_OK(the_case->stable(fd));
			round--; /* not a round of the stable check */
			continue;
		}
		if (cmd & STABLE_EXPECT) {
			/* A case's own write (scatter, barrier) lands here: arm, wait,
			 * and verify the first page when asked to. */
			uint32_t imm = (uint32_t)cmd;
			struct xfer_completion c = {.user_data = cmd, .timeout_ms = 15000};
			CHECK_OK(xfer_expect_imm(e, imm, 1, &c));
			t_send_u64(fd, cmd);
			struct xfer_cqe cqe = t_wait_cqe(e, 20000);
			CHECK(cqe.user_data == cmd && cqe.res == 0);
			if (cmd & STABLE_VERIFY) {
				t_fill(want, 4096, imm);
				CHECK(memcmp(buf, want, 4096) == 0);
			}
			t_send_u64(fd, cmd);
			round--;
			continue;
		}
		struct xfer_completion c = {.user_data = round, .timeout_ms = 10000};
		CHECK_OK(xfer_expect_imm(e, STABLE_IMM, 1, &c));
		t_send_u64(fd, round);
		struct xfer_cqe cqe = t_wait_cqe(e, 15000);
		CHECK(cqe.user_data == round && cqe.res == 0);
		t_fill(want, STABLE_LEN, 1000 + round);
		CHECK(memcmp(buf, want, STABLE_LEN) == 0);
		/* A case may write here next (a scatter): order our worker after this
		 * read, as causality through other processes is invisible to TSan. */
		t_sync_worker(e);
		t_send_u64(fd, round);
	}
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	free(buf);
	free(want);
	return 0;
}

/* ----------------------------------------------------------------- roles */

static int target_main(int fd)
{
	struct xfer_attr a;
	t_attr(&a);
	if (the_case->tweak_attr)
		the_case->tweak_attr(&a, 1);
	struct fault_target t = {.fd = fd};
	t.e = t_engine(&a);
	t.init = t_connect(t.e, fd);
	t.buf = malloc(F_REGION + 2 * F_GUARD);
	CHECK(t.buf);
	memset(t.buf, F_GUARD_BYTE, F_REGION + 2 * F_GUARD);
	memset(t.buf + F_GUARD, 0, F_REGION);
	CHECK_OK(xfer_mr_reg(t.e, t.buf + F_GUARD, F_REGION, &t.mr));
	t_send_desc(fd, t.mr);
	int rc = the_case->target(&t);
	t_sync_worker(t.e);
	check_guards(&t);
	if (t.mr)
		xfer_mr_dereg(t.mr);
	xfer_engine_destroy(t.e);
	free(t.buf);
	return rc;
}

static int child_main(int idx, int fd, void *arg)
{
	(void)arg;
	return idx == 0 ? target_main(fd) : stable_main(fd);
}

static int initiator_main(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	if (the_case->tweak_attr)
		the_case->tweak_attr(&a, 0);
	struct fault_init f = {.fd_t = fds[0], .fd_s = fds[1]};
	f.e = t_engine(&a);
	f.t = t_connect(f.e, f.fd_t);
	f.s = t_connect(f.e, f.fd_s);
	f.src_buf = malloc(F_REGION);
	CHECK(f.src_buf);
	t_fill(f.src_buf, F_REGION, 1);
	CHECK_OK(xfer_mr_reg(f.e, f.src_buf, F_REGION, &f.src));
	f.t_rmr = t_recv_rmr(f.e, f.t, f.fd_t);
	f.s_rmr = t_recv_rmr(f.e, f.s, f.fd_s);
	stable_check(&f);
	int rc = the_case->initiator(&f);
	if (rc == 0) {
		stable_check(&f); /* the stable peer survived the fault */
		t_send_u64(f.fd_s, 0);
	}
	xfer_rmr_free(f.t_rmr);
	xfer_rmr_free(f.s_rmr);
	xfer_engine_destroy(f.e);
	free(f.src_buf);
	return rc;
}

int fault_run(const struct fault_case *c)
{
	the_case = c;
	fprintf(stderr, "fault case %s on %s\n", c->name, t_provider());
	if (c->prepare) {
		int rc = c->prepare();
		if (rc)
			return rc;
	}
	return t_run_procs(2, child_main, initiator_main, NULL);
}
