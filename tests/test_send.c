/* SEND/RECV of 0 .. msg_max bytes in both directions, through the bouncing
 * receive pool (many more messages than buffers, so reposting is exercised),
 * plus the polled and the callback receive paths. */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

#define MSG_MAX 8192
#define ROUNDS 3

static const size_t lens[] = {0, 1, 2, 15, 16, 63, 64, 65, 1000, 4095, 4096, 4097, 8191, MSG_MAX};
#define NLENS (sizeof(lens) / sizeof(lens[0]))

static void send_all(xfer_engine_t *e, xfer_peer_t peer, uint64_t seed_base)
{
	static uint8_t buf[NLENS][MSG_MAX];
	for (int r = 0; r < ROUNDS; r++) {
		for (size_t i = 0; i < NLENS; i++) {
			t_fill(buf[i], lens[i], seed_base + i);
			struct xfer_completion c = {.user_data = i};
			int rc;
			while ((rc = xfer_send(e, peer, buf[i], lens[i], &c)) == -EAGAIN)
				usleep(10);
			CHECK_OK(rc);
		}
		/* Buffers stay valid until their sends complete. */
		for (size_t i = 0; i < NLENS; i++) {
			struct xfer_cqe cqe = t_wait_cqe(e, 30000);
			CHECK_RC(cqe.res, 0);
			CHECK(cqe.kind == XFER_OP_SEND);
		}
	}
	uint8_t big[MSG_MAX + 1] = {0};
	CHECK_RC(xfer_send(e, peer, big, MSG_MAX + 1, NULL), -EMSGSIZE);
}

/* Messages may arrive in any order: count each expected length. */
static void recv_all(xfer_engine_t *e, uint64_t src_id, uint64_t seed_base)
{
	static uint8_t got[MSG_MAX], want[MSG_MAX];
	int seen[NLENS] = {0};
	for (size_t n = 0; n < NLENS * ROUNDS; n++) {
		struct xfer_msg_info info;
		CHECK_RC(xfer_recv_wait(e, got, sizeof(got), &info, 30000), 1);
		CHECK(info.src_id == src_id);
		size_t i = 0;
		while (i < NLENS && lens[i] != info.len)
			i++;
		CHECK(i < NLENS);
		t_fill(want, lens[i], seed_base + i);
		CHECK(memcmp(got, want, lens[i]) == 0);
		seen[i]++;
	}
	for (size_t i = 0; i < NLENS; i++)
		CHECK(seen[i] == ROUNDS);
	CHECK(xfer_recv(e, got, sizeof(got), NULL) == 0);
}

static int side(int idx, int fd, void *arg)
{
	(void)arg;
	struct xfer_attr a;
	t_attr(&a);
	a.msg_max = MSG_MAX;
	a.recv_count = 8; /* fewer buffers than messages in flight */
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peer = t_connect(e, fd);
	uint64_t other = xfer_peer_id(e, peer);
	CHECK(other != 0 && other != xfer_engine_id(e));
	if (idx == 0) {
		send_all(e, peer, 1000);
		recv_all(e, other, 2000);
	} else {
		recv_all(e, other, 1000);
		send_all(e, peer, 2000);
	}
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 1);
	xfer_engine_destroy(e);
	return 0;
}

/* Callback path: the handler runs on the worker thread. */
static atomic_int cb_count;
static atomic_int cb_bad;
static void on_recv(void *ctx, uint64_t src, const void *data, size_t len)
{
	(void)ctx, (void)src;
	uint8_t want[64];
	t_fill(want, len, 77);
	if (len != 64 || memcmp(data, want, len) != 0)
		atomic_fetch_add(&cb_bad, 1);
	atomic_fetch_add(&cb_count, 1);
}

static int cb_side(int idx, int fd, void *arg)
{
	(void)arg;
	struct xfer_attr a;
	t_attr(&a);
	if (idx == 1) {
		a.on_recv = on_recv;
		a.recv_count = 4;
	}
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peer = t_connect(e, fd);
	if (idx == 0) {
		uint8_t msg[64];
		t_fill(msg, sizeof(msg), 77);
		for (int i = 0; i < 100; i++) {
			int rc;
			while ((rc = xfer_send(e, peer, msg, sizeof(msg), NULL)) == -EAGAIN)
				usleep(10);
			CHECK_OK(rc);
			CHECK_RC(t_wait_cqe(e, 30000).res, 0);
		}
		CHECK(t_recv_u64(fd) == 100);
	} else {
		uint8_t tmp[8];
		for (int spins = 0; atomic_load(&cb_count) < 100 && spins < 30000; spins++)
			usleep(1000);
		CHECK(atomic_load(&cb_count) == 100);
		CHECK(atomic_load(&cb_bad) == 0);
		CHECK_RC(xfer_recv(e, tmp, sizeof(tmp), NULL), -EINVAL);
		t_send_u64(fd, 100);
	}
	xfer_engine_destroy(e);
	return 0;
}

static int queue_round(void)
{
	return t_run_pair(side, side, NULL);
}

static int callback_round(void)
{
	return t_run_pair(cb_side, cb_side, NULL);
}

int main(void)
{
	int rc = t_run_isolated(queue_round);
	if (rc)
		return rc;
	return t_run_isolated(callback_round);
}
