/* Decoder deadlines.
 *
 *   stuck:  the prefiller is alive but never computes the request. At the
 *           deadline the decoder cancels, the prefiller confirms (nothing
 *           was written), the request fails with -ETIMEDOUT within its
 *           deadline, and the instance stays usable: nothing was revoked.
 *   frozen: the prefiller stops (SIGSTOP) in the middle of a request. The
 *           decoder fails the request within its deadline without any
 *           answer, by revoking that rank's registration; when the prefiller
 *           wakes up, its late writes must not touch the poisoned pages.
 *           The instance then rejoins and serves again.
 *   frozen-silent: the same without heartbeats, so that only the deadline
 *           and the cancel's grace period can notice.
 *
 *   test_kv_deadline stuck|frozen|frozen-silent
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "kv_test.h"

#define POOL 2048u
#define TIMEOUT_MS 1500u
#define HEARTBEAT_MS 100u

static bool frozen;
static uint32_t heartbeat_ms = HEARTBEAT_MS;

static struct xfer_kv_layout layout(void)
{
	return kvt_layout(XFER_KV_MLA, 1, 1, 0, POOL, 0);
}

static int prefiller(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_kv_layout l = layout();
	void *kv;
	xfer_kv_prefiller_t *p = kvt_prefiller(&l, &kv, heartbeat_ms);
	kvt_send_addr(fd, xfer_kv_prefiller_engine(p));
	t_send_u64(fd, (uint64_t)getpid());
	/* frozen: it stops itself after its first layer (see kvt_serve). */
	struct kvt_serve o = {.ignore = !frozen, .layer_us = frozen ? 20000 : 0,
			      .freeze_after = frozen ? 1 : 0};
	kvt_prefill_serve(p, &l, kv, fd, &o);
	xfer_kv_prefiller_destroy(p);
	free(kv);
	return 0;
}

static uint32_t join(xfer_kv_decoder_t *d, const uint8_t *addr, size_t len)
{
	struct xfer_kv_rank r = {.addr = addr, .addr_len = len, .layout = layout()};
	uint32_t g;
	int rc;
	uint64_t until = kvt_ms() + 5000;
	/* A rank declared dead can join again once its old peer is gone. */
	while ((rc = xfer_kv_dec_join(d, &r, 1, &g)) == -EBUSY && kvt_ms() < until)
		usleep(20000);
	CHECK_OK(rc);
	return g;
}

static struct xfer_kv_dec_event run_one(xfer_kv_decoder_t *d, uint32_t g, uint64_t id)
{
	uint64_t t0 = kvt_ms();
	CHECK_OK(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = id, .group = g, .tokens = 3000,
								 .timeout_ms = TIMEOUT_MS}));
	struct xfer_kv_dec_event ev = kvt_event(d, TIMEOUT_MS + 2000);
	uint64_t took = kvt_ms() - t0;
	fprintf(stderr, "request %llu: %s after %llu ms\n", (unsigned long long)id,
		xfer_strerror(ev.status), (unsigned long long)took);
	CHECK(ev.id == id && ev.status < 0);
	CHECK(took <= TIMEOUT_MS + 250);
	return ev;
}

static int decoder(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	struct xfer_kv_layout l = layout();
	void *kv;
	xfer_kv_decoder_t *d = kvt_decoder(&l, &kv, heartbeat_ms, 8);
	uint8_t addr[XFER_ADDR_MAX];
	size_t alen = t_recv_blob(fds[0], addr, sizeof(addr));
	pid_t pid = (pid_t)t_recv_u64(fds[0]);
	uint32_t g = join(d, addr, alen);
	usleep(5 * HEARTBEAT_MS * 1000); /* liveness established both ways */
	struct xfer_kv_dec_stats st;

	if (!frozen) {
		struct xfer_kv_dec_event ev = run_one(d, g, 1);
		CHECK_RC(ev.status, -ETIMEDOUT);
		/* Nothing was written: the pages still hold the decoder's poison. */
		CHECK(kvt_is_poison(&l, kv, ev.pages, ev.npages, KVT_POISON));
		CHECK_OK(xfer_kv_dec_release(d, 1));
		xfer_kv_dec_stats(d, &st);
		/* Confirmed by the prefiller (an ACK to our cancel, or its own
		 * deadline's FAIL, whichever came first): nothing was revoked. */
		CHECK(st.revocations == 0 && st.failed == 1);
		CHECK(xfer_kv_dec_group_state(d, g) == XFER_KV_GROUP_LIVE);
		/* Deadline-free requests still come back, and twice is fine. */
		CHECK_OK(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = 2, .group = g, .tokens = 8}));
		CHECK_OK(xfer_kv_dec_cancel(d, 2));
		CHECK_OK(xfer_kv_dec_cancel(d, 2));
		struct xfer_kv_dec_event ev2 = kvt_event(d, 3000);
		CHECK(ev2.id == 2 && ev2.status == -ECANCELED);
		CHECK_RC(xfer_kv_dec_cancel(d, 2), -EALREADY);
		CHECK_OK(xfer_kv_dec_release(d, 2));
		CHECK_RC(xfer_kv_dec_cancel(d, 2), -ENOENT);
	} else {
		struct xfer_kv_dec_event ev = run_one(d, g, 1);
		/* It froze mid-request, and is frozen still. */
		CHECK(ev.status == -XFER_EPEER || ev.status == -ETIMEDOUT ||
		      ev.status == -ECONNABORTED);
		xfer_kv_dec_stats(d, &st);
		CHECK(st.revocations >= 1);
		uint32_t *pages = malloc(ev.npages * sizeof(uint32_t)), np = ev.npages;
		CHECK(pages);
		memcpy(pages, ev.pages, np * sizeof(uint32_t));
		kvt_poison(&l, kv, pages, np, 0x3c);
		/* It wakes up and goes on writing into a registration that is gone. */
		CHECK(kill(pid, SIGCONT) == 0);
		usleep(500000);
		t_sync_worker(xfer_kv_decoder_engine(d));
		CHECK(kvt_is_poison(&l, kv, pages, np, 0x3c));
		CHECK_OK(xfer_kv_dec_release(d, 1));
		/* It was only frozen: the instance rejoins and serves again. */
		CHECK_OK(xfer_kv_dec_leave(d, g));
		uint32_t g2 = join(d, addr, alen);
		usleep(5 * HEARTBEAT_MS * 1000);
		CHECK_OK(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = 3, .group = g2, .tokens = 3000,
									 .timeout_ms = 10000}));
		struct xfer_kv_dec_event ev3 = kvt_event(d, 12000);
		CHECK(ev3.id == 3);
		CHECK_RC(ev3.status, 0);
		CHECK(kvt_verify(&l, kv, ev3.pages, ev3.npages, 3) == 0);
		CHECK_OK(xfer_kv_dec_release(d, 3));
		free(pages);
	}
	t_send_u64(fds[0], 0);
	xfer_kv_decoder_destroy(d);
	free(kv);
	return 0;
}

int main(int argc, char **argv)
{
	CHECK(argc == 2);
	frozen = !strncmp(argv[1], "frozen", 6);
	CHECK(frozen || !strcmp(argv[1], "stuck"));
	if (!strcmp(argv[1], "frozen-silent"))
		heartbeat_ms = 0;
	return t_run_procs(1, prefiller, decoder, NULL);
}
