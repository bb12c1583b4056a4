/* A flood of small writes against a tiny submission queue and operation pool,
 * with nobody reaping for a while: submissions fail with -EAGAIN instead of
 * blocking or growing, and every accepted one completes exactly once. */
#include <string.h>
#include <unistd.h>

#include "helpers.h"

#define FLOOD 20000

static int initiator(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	a.submit_depth = 64;
	a.max_ops = 32;
	a.imm_slots = 16;
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peer = t_connect(e, fd);
	static unsigned char seen[FLOOD];
	uint64_t accepted = 0, again = 0, reaped = 0;
	struct xfer_cqe c[64];
	while (accepted < FLOOD) {
		struct xfer_completion comp = {.user_data = accepted};
		int rc = xfer_write_imm(e, peer, 42, &comp);
		if (rc == -EAGAIN) {
			again++;
			/* Reap only now and then, so the queues really fill up. */
			if (again % 64 == 0) {
				int n = xfer_cq_poll(e, c, 64);
				for (int i = 0; i < n; i++) {
					CHECK_RC(c[i].res, 0);
					CHECK(c[i].user_data < FLOOD && seen[c[i].user_data]++ == 0);
				}
				reaped += (uint64_t)n;
			}
			continue;
		}
		CHECK_OK(rc);
		accepted++;
	}
	while (reaped < accepted) {
		int n = xfer_cq_wait(e, c, 64, 30000);
		CHECK(n > 0);
		for (int i = 0; i < n; i++) {
			CHECK_RC(c[i].res, 0);
			CHECK(c[i].user_data < FLOOD && seen[c[i].user_data]++ == 0);
		}
		reaped += (uint64_t)n;
	}
	CHECK(again > 0);
	CHECK(xfer_cq_wait(e, c, 1, 200) == -ETIMEDOUT);
	printf("flood: %d accepted, %llu -EAGAIN\n", FLOOD, (unsigned long long)again);
	t_send_u64(fd, accepted);
	CHECK(t_recv_u64(fd) == 1);
	xfer_engine_destroy(e);
	return 0;
}

static int target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	(void)t_connect(e, fd);
	struct xfer_completion c = {.user_data = 7};
	CHECK_OK(xfer_expect_imm(e, 42, FLOOD, &c));
	uint64_t n = t_recv_u64(fd);
	CHECK(n == FLOOD);
	struct xfer_cqe cqe = t_wait_cqe(e, 30000);
	CHECK(cqe.user_data == 7 && cqe.res == 0);
	uint32_t left = 1;
	CHECK_OK(xfer_imm_disarm(e, 42, &left));
	CHECK(left == 0);
	t_send_u64(fd, 1);
	xfer_engine_destroy(e);
	return 0;
}

int main(void)
{
	return t_run_pair(initiator, target, NULL);
}
