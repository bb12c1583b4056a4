/* Prefill TP -> decode TP as separate processes, every byte verified: each
 * decode rank must hold exactly its heads of every layer of every request
 * (whichever prefill ranks wrote them), the extra context, and nothing may
 * have been written outside the requests' pages.
 *
 *   test_kv_tp gqa|mla P D [kv_heads [prefill_fused]]
 */
#include <string.h>

#include "kv_test.h"

#define POOL_PAGES 4096u
/* Room for two rounds: one decode rank may start the next round while the
 * prefill still waits for another rank's request of the last one. */
#define PF_POOL_PAGES (2 * POOL_PAGES)
#define ROUNDS 2

static uint32_t kind, nP, nD, heads = 8, pf_fused;
/* 7999 tokens: more page indices than one message holds (chunked request). */
static const uint32_t tokens[] = {1, 5, 37, 200, 1000, 7999};
#define NREQ (sizeof(tokens) / sizeof(tokens[0]))

static int prefill_rank(int rank, int fd)
{
	struct xfer_kv_layout l = kvt_layout(kind, heads, nP, (uint32_t)rank, PF_POOL_PAGES, pf_fused);
	void *kv;
	xfer_kv_prefiller_t *p = kvt_prefiller(&l, &kv, 0);
	kvt_send_addr(fd, xfer_kv_prefiller_engine(p));
	struct kvt_serve o = {0};
	kvt_prefill_serve(p, &l, kv, fd, &o);
	struct xfer_kv_pf_stats st;
	xfer_kv_pf_stats(p, &st);
	CHECK(st.msgs_dropped == 0 && st.jobs_failed == 0);
	t_send_u64(fd, o.served);
	xfer_kv_prefiller_destroy(p);
	free(kv);
	return 0;
}

static int decode_rank(int rank, int fd)
{
	struct xfer_kv_layout l = kvt_layout(kind, heads, nD, (uint32_t)rank, POOL_PAGES, 0);
	void *kv;
	xfer_kv_decoder_t *d = kvt_decoder(&l, &kv, 0, 64);
	kvt_send_addr(fd, xfer_kv_decoder_engine(d));
	struct xfer_kv_rank ranks[XFER_KV_TP_MAX];
	uint8_t addr[XFER_KV_TP_MAX][XFER_ADDR_MAX];
	for (uint32_t i = 0; i < nP; i++) {
		ranks[i].addr_len = t_recv_blob(fd, addr[i], XFER_ADDR_MAX);
		ranks[i].addr = addr[i];
		ranks[i].layout = kvt_layout(kind, heads, nP, i, PF_POOL_PAGES, pf_fused);
	}
	uint32_t g;
	CHECK_OK(xfer_kv_dec_join(d, ranks, nP, &g));
	CHECK(xfer_kv_dec_group_state(d, g) == XFER_KV_GROUP_LIVE);
	uint8_t *used = calloc(POOL_PAGES, 1);
	CHECK(used);
	for (int round = 0; round < ROUNDS; round++) {
		for (uint32_t k = 0; k < NREQ; k++) {
			struct xfer_kv_request r = {.id = round * 100 + k + 1, .group = g,
						    .tokens = tokens[k], .timeout_ms = 20000};
			CHECK_OK(xfer_kv_dec_admit(d, &r));
		}
		CHECK_RC(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = round * 100 + 1, .group = g,
									 .tokens = 1}),
			 -EEXIST);
		for (uint32_t k = 0; k < NREQ; k++) {
			struct xfer_kv_dec_event ev = kvt_event(d, 30000);
			CHECK_RC(ev.status, 0);
			uint32_t want = (uint32_t)((tokens[ev.id % 100 - 1] + KVT_PAGE_TOKENS - 1) /
						   KVT_PAGE_TOKENS);
			CHECK(ev.npages == want);
			uint64_t bad = kvt_verify(&l, kv, ev.pages, ev.npages, ev.id);
			if (bad)
				fprintf(stderr, "decode rank %d: request %llu: %llu blocks wrong\n", rank,
					(unsigned long long)ev.id, (unsigned long long)bad);
			CHECK(bad == 0);
			uint8_t ctx[KVT_CTX];
			kvt_ctx(ctx, sizeof(ctx), ev.id);
			CHECK(memcmp(ev.ctx, ctx, sizeof(ctx)) == 0);
			for (uint32_t i = 0; i < ev.npages; i++)
				used[ev.pages[i]] = 1;
			CHECK_RC(xfer_kv_dec_release(d, ev.id), 0);
			CHECK_RC(xfer_kv_dec_release(d, ev.id), -ENOENT);
		}
	}
	CHECK(xfer_kv_dec_free_pages(d) == POOL_PAGES);
	/* No stray writes: pages no request owned still hold the poison. */
	for (uint32_t pg = 0; pg < POOL_PAGES; pg++)
		if (!used[pg])
			CHECK(kvt_is_poison(&l, kv, &pg, 1, KVT_POISON));
	struct xfer_kv_dec_stats st;
	xfer_kv_dec_stats(d, &st);
	CHECK(st.completed == ROUNDS * NREQ && st.failed == 0 && st.revocations == 0);
	CHECK(st.msgs_dropped == 0);
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 2);
	xfer_kv_decoder_destroy(d);
	free(kv);
	free(used);
	return 0;
}

static int child(int idx, int fd, void *arg)
{
	(void)arg;
	return (uint32_t)idx < nP ? prefill_rank(idx, fd) : decode_rank(idx - (int)nP, fd);
}

static int parent(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	uint8_t addr[XFER_KV_TP_MAX][XFER_ADDR_MAX];
	size_t alen[XFER_KV_TP_MAX];
	for (uint32_t i = 0; i < nP; i++)
		alen[i] = t_recv_blob(fds[i], addr[i], XFER_ADDR_MAX);
	for (uint32_t j = 0; j < nD; j++) {
		uint8_t skip[XFER_ADDR_MAX];
		t_recv_blob(fds[nP + j], skip, sizeof(skip));
		for (uint32_t i = 0; i < nP; i++)
			t_send_blob(fds[nP + j], addr[i], alen[i]);
	}
	for (uint32_t j = 0; j < nD; j++)
		CHECK(t_recv_u64(fds[nP + j]) == 1);
	uint64_t served = 0;
	for (uint32_t i = 0; i < nP; i++) {
		t_send_u64(fds[i], 0);
		served += t_recv_u64(fds[i]);
	}
	/* Every request is a job on at least one prefill rank. */
	CHECK(served >= ROUNDS * NREQ);
	for (uint32_t j = 0; j < nD; j++)
		t_send_u64(fds[nP + j], 2);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s gqa|mla P D [kv_heads [prefill_fused]]\n", argv[0]);
		return 2;
	}
	kind = !strcmp(argv[1], "mla") ? XFER_KV_MLA : XFER_KV_GQA;
	nP = (uint32_t)atoi(argv[2]);
	nD = (uint32_t)atoi(argv[3]);
	if (argc > 4)
		heads = (uint32_t)atoi(argv[4]);
	if (argc > 5)
		pf_fused = (uint32_t)atoi(argv[5]);
	CHECK(nP >= 1 && nD >= 1 && nP + nD <= 16);
	fprintf(stderr, "%s prefill TP%u -> decode TP%u, %u KV heads%s, on %s\n", argv[1], nP, nD,
		heads, pf_fused ? ", prefill K|V fused" : "", t_provider());
	return t_run_procs((int)(nP + nD), child, parent, NULL);
}
