/* A prefiller is SIGKILLed in the middle of a request. The decoder must fail
 * the request within its deadline (heartbeats notice the death; revoking
 * the dead rank's registration makes sure none of its writes still in
 * flight can land), then reuse the same pages for a request to another
 * prefiller, whose data must come out exact and stay so. The dead group
 * refuses admissions and leaves without the decoder restarting. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "kv_test.h"

#define POOL 2048u
#define TOKENS 2400u
#define TIMEOUT_MS 3000u
#define HEARTBEAT_MS 100u

static struct xfer_kv_layout layout(void)
{
	return kvt_layout(XFER_KV_GQA, 4, 1, 0, POOL, 0);
}

static int prefiller(int idx, int fd, void *arg)
{
	(void)arg;
	struct xfer_kv_layout l = layout();
	void *kv;
	xfer_kv_prefiller_t *p = kvt_prefiller(&l, &kv, HEARTBEAT_MS);
	kvt_send_addr(fd, xfer_kv_prefiller_engine(p));
	/* Prefiller 0 dies after two of its four layers, with writes in flight. */
	struct kvt_serve o = {.layer_us = 3000, .die_after = idx == 0 ? 2 : 0};
	kvt_prefill_serve(p, &l, kv, fd, &o);
	xfer_kv_prefiller_destroy(p);
	free(kv);
	return 0;
}

static uint32_t join_one(xfer_kv_decoder_t *d, int fd)
{
	uint8_t addr[XFER_ADDR_MAX];
	struct xfer_kv_rank r = {.addr = addr, .layout = layout()};
	r.addr_len = t_recv_blob(fd, addr, sizeof(addr));
	uint32_t g;
	CHECK_OK(xfer_kv_dec_join(d, &r, 1, &g));
	return g;
}

static int decoder(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	struct xfer_kv_layout l = layout();
	void *kv;
	xfer_kv_decoder_t *d = kvt_decoder(&l, &kv, HEARTBEAT_MS, 16);
	uint32_t ga = join_one(d, fds[0]), gb = join_one(d, fds[1]);
	/* A few heartbeats, so that liveness is established both ways (on shm a
	 * peer that never answered a probe is not declared dead). */
	usleep(5 * HEARTBEAT_MS * 1000);

	uint64_t t0 = kvt_ms();
	CHECK_OK(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = 1, .group = ga, .tokens = TOKENS,
								 .timeout_ms = TIMEOUT_MS}));
	struct xfer_kv_dec_event ev = kvt_event(d, TIMEOUT_MS + 2000);
	uint64_t took = kvt_ms() - t0;
	fprintf(stderr, "request to the killed prefiller: %s after %llu ms\n", xfer_strerror(ev.status),
		(unsigned long long)took);
	CHECK(ev.id == 1 && ev.status < 0);
	/* Within its deadline, give or take the scheduling of two cores. */
	CHECK(took <= TIMEOUT_MS + 250);
	CHECK(xfer_kv_dec_group_state(d, ga) == XFER_KV_GROUP_DEAD);
	struct xfer_kv_dec_stats st;
	xfer_kv_dec_stats(d, &st);
	CHECK(st.revocations >= 1);

	/* The pages are safe now: poison them and hand them to the next request. */
	uint32_t *dead_pages = malloc(ev.npages * sizeof(uint32_t)), ndead = ev.npages;
	CHECK(dead_pages);
	memcpy(dead_pages, ev.pages, ndead * sizeof(uint32_t));
	kvt_poison(&l, kv, dead_pages, ndead, 0x5a);
	CHECK_OK(xfer_kv_dec_release(d, 1));
	CHECK_RC(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = 9, .group = ga, .tokens = 1}),
		 -XFER_EPEER);
	CHECK_OK(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = 2, .group = gb, .tokens = TOKENS,
								 .timeout_ms = 10000}));
	ev = kvt_event(d, 12000);
	CHECK(ev.id == 2);
	CHECK_RC(ev.status, 0);
	CHECK(ev.npages == ndead && !memcmp(ev.pages, dead_pages, ndead * sizeof(uint32_t)));
	CHECK(kvt_verify(&l, kv, ev.pages, ev.npages, 2) == 0);
	/* Anything of the dead prefiller's still on its way would land now. */
	usleep(300000);
	t_sync_worker(xfer_kv_decoder_engine(d));
	CHECK(kvt_verify(&l, kv, ev.pages, ev.npages, 2) == 0);
	CHECK_OK(xfer_kv_dec_release(d, 2));

	/* The dead prefill instance leaves; the decoder carries on. */
	CHECK_OK(xfer_kv_dec_leave(d, ga));
	uint64_t until = kvt_ms() + 3000;
	while (xfer_kv_dec_group_state(d, ga) != -ENOENT) {
		CHECK(kvt_ms() < until);
		usleep(10000);
	}
	CHECK(xfer_kv_dec_group_state(d, gb) == XFER_KV_GROUP_LIVE);
	t_send_u64(fds[1], 0);
	xfer_kv_decoder_destroy(d);
	free(kv);
	free(dead_pages);
	return 0;
}

int main(void)
{
	t_child_may_die = 0;
	return t_run_procs(2, prefiller, decoder, NULL);
}
