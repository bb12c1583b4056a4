/* Cancellation racing with in-flight writes. The decoder cancels requests at
 * random moments (before the prefiller has seen them, mid-layer, after the
 * last write) many times. Once a cancelled request's event arrives its pages
 * are poisoned: half of them are held back for several iterations and must
 * still hold the poison when released, the other half are reused at once by
 * the next request, whose data must come out exact. A late write of a
 * cancelled request would break one or the other.
 *
 *   test_kv_cancel [iterations]
 */
#include <string.h>
#include <unistd.h>

#include "kv_test.h"

#define POOL 4096u
#define MAX_TOKENS 1600u
#define HOLD 6 /* iterations a cancelled request's pages stay poisoned */

static int iterations = 300;

struct held {
	uint32_t *pages, n;
	uint64_t id;
	uint8_t poison;
};

static int prefiller(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_kv_layout l = kvt_layout(XFER_KV_GQA, 4, 1, 0, 2 * POOL, 0);
	void *kv;
	xfer_kv_prefiller_t *p = kvt_prefiller(&l, &kv, 0);
	kvt_send_addr(fd, xfer_kv_prefiller_engine(p));
	/* Compute long enough per layer that cancels land among the writes. */
	struct kvt_serve o = {.layer_us = 250};
	kvt_prefill_serve(p, &l, kv, fd, &o);
	struct xfer_kv_pf_stats st;
	xfer_kv_pf_stats(p, &st);
	t_send_u64(fd, st.jobs_failed);
	t_send_u64(fd, st.writes_cut);
	t_send_u64(fd, st.msgs_dropped);
	xfer_kv_prefiller_destroy(p);
	free(kv);
	return 0;
}

static void release_held(xfer_kv_decoder_t *d, const struct xfer_kv_layout *l, void *kv,
			 struct held *h)
{
	t_sync_worker(xfer_kv_decoder_engine(d));
	if (!kvt_is_poison(l, kv, h->pages, h->n, h->poison)) {
		fprintf(stderr, "late write into cancelled request %llu\n", (unsigned long long)h->id);
		exit(1);
	}
	CHECK_OK(xfer_kv_dec_release(d, h->id));
	free(h->pages);
	h->pages = NULL;
}

static int decoder(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_kv_layout l = kvt_layout(XFER_KV_GQA, 4, 1, 0, POOL, 0);
	void *kv;
	xfer_kv_decoder_t *d = kvt_decoder(&l, &kv, 0, 16);
	uint8_t addr[XFER_ADDR_MAX];
	struct xfer_kv_rank rank = {.addr = addr, .layout = kvt_layout(XFER_KV_GQA, 4, 1, 0, 2 * POOL, 0)};
	rank.addr_len = t_recv_blob(fd, addr, sizeof(addr));
	uint32_t g;
	CHECK_OK(xfer_kv_dec_join(d, &rank, 1, &g));

	/* How long a whole request takes here (cores, provider, sanitizer):
	 * cancels are then spread over that span, so both outcomes occur. */
	uint64_t span_us = UINT64_MAX;
	for (uint64_t id = 1000000; id < 1000004; id++) {
		CHECK_OK(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = id, .group = g,
									 .tokens = MAX_TOKENS / 2}));
		struct xfer_kv_dec_event ev = kvt_event(d, 30000);
		CHECK_RC(ev.status, 0);
		CHECK(kvt_verify(&l, kv, ev.pages, ev.npages, id) == 0);
		if (ev.elapsed_ns / 1000 < span_us)
			span_us = ev.elapsed_ns / 1000; /* the warm ones */
		CHECK_OK(xfer_kv_dec_release(d, id));
	}
	fprintf(stderr, "a request of %u tokens takes %llu us\n", MAX_TOKENS / 2,
		(unsigned long long)span_us);
	struct held held[HOLD] = {0};
	uint64_t rs = 12345;
	int completed = 0, cancelled = 0, early = 0;
	for (int it = 0; it < iterations; it++) {
		uint64_t id = (uint64_t)it + 1;
		uint32_t tokens = 1 + (uint32_t)(t_rand(&rs) % MAX_TOKENS);
		CHECK_OK(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = id, .group = g,
									 .tokens = tokens,
									 .timeout_ms = 10000}));
		/* From "at once" to "probably after the last write". */
		uint32_t wait_us = (uint32_t)(t_rand(&rs) % (span_us * 3 / 2 + 1));
		if (it % 10 == 0)
			wait_us = 0; /* the cancel may overtake the request itself */
		if (wait_us > 100)
			usleep(wait_us);
		int rc = xfer_kv_dec_cancel(d, id);
		CHECK(rc == 0 || rc == -EALREADY);
		struct xfer_kv_dec_event ev = kvt_event(d, 10000);
		CHECK(ev.id == id);
		if (ev.status == 0) {
			/* Finished before the cancel: it must be whole. */
			CHECK(kvt_verify(&l, kv, ev.pages, ev.npages, id) == 0);
			CHECK_OK(xfer_kv_dec_release(d, id));
			completed++;
			continue;
		}
		CHECK_RC(ev.status, -ECANCELED);
		cancelled++;
		early += wait_us <= 100;
		uint8_t poison = (uint8_t)(1 + it % 250);
		kvt_poison(&l, kv, ev.pages, ev.npages, poison);
		if (it % 2) {
			/* Reused at once by the next request. */
			CHECK_OK(xfer_kv_dec_release(d, id));
			continue;
		}
		struct held *h = &held[(it / 2) % HOLD];
		if (h->pages)
			release_held(d, &l, kv, h);
		*h = (struct held){.pages = malloc(ev.npages * sizeof(uint32_t)), .n = ev.npages,
				   .id = id, .poison = poison};
		CHECK(h->pages);
		memcpy(h->pages, ev.pages, ev.npages * sizeof(uint32_t));
	}
	/* Give any straggler every chance to land, then look again. */
	usleep(200000);
	for (int i = 0; i < HOLD; i++)
		if (held[i].pages)
			release_held(d, &l, kv, &held[i]);
	struct xfer_kv_dec_stats st;
	xfer_kv_dec_stats(d, &st);
	fprintf(stderr, "%d completed, %d cancelled (%d at once), %llu cancels confirmed, "
		"%llu failed, %llu revocations, %llu messages dropped\n", completed, cancelled, early,
		(unsigned long long)st.cancel_acks, (unsigned long long)st.failed,
		(unsigned long long)st.revocations, (unsigned long long)st.msgs_dropped);
	/* A live prefiller confirms every cancel: nothing needed revoking. */
	CHECK(st.revocations == 0 && st.failed == 0 && st.msgs_dropped == 0);
	/* Cancels the prefiller confirmed (it had layers left to write); the
	 * others found every write posted already and the count completed. */
	CHECK(st.cancel_acks >= (uint64_t)iterations / 10);
	struct xfer_stats es;
	xfer_engine_stats(xfer_kv_decoder_engine(d), &es);
	CHECK(es.imms_dropped == 0);
	t_send_u64(fd, 0);
	uint64_t pf_failed = t_recv_u64(fd), pf_cut = t_recv_u64(fd), pf_dropped = t_recv_u64(fd);
	fprintf(stderr, "prefiller: %llu jobs cut short, %llu paged writes cut mid-way\n",
		(unsigned long long)pf_failed, (unsigned long long)pf_cut);
	CHECK(pf_dropped == 0);
	/* The race was really run: both outcomes, cancels that came after the
	 * request had begun (not only the tenth sent at once), and cuts
	 * mid-transfer. Counted that way, not as a share of all cancels: the
	 * share moves with the machine's speed (under ASan on two vCPUs, 2026-12-03,
	 * 60 of 300 were cancelled, 31 at once, against a bound of more than 60). */
	CHECK(completed > iterations / 20 && cancelled - early > iterations / 20);
	CHECK(pf_failed > (uint64_t)iterations / 20);
	xfer_kv_decoder_destroy(d);
	free(kv);
	return 0;
}

static int decoder_parent(int n, const int *fds, void *arg)
{
	(void)n;
	return decoder(0, fds[0], arg);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		iterations = atoi(argv[1]);
	CHECK(iterations >= 20);
	return t_run_procs(1, prefiller, decoder_parent, NULL);
}
