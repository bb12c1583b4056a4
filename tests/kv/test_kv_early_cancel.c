/* A decode rank cancels a request before the prefiller has seen it (its
 * CANCEL overtakes its REQ, or it gave up before asking). The prefiller must
 * answer at once (nothing of it can be in flight), ignore the request if it
 * still comes, and not hold the job's pages waiting for that rank while the
 * other decode rank of the same request is served. Decode rank 1 is a bare
 * engine speaking the module's wire format, so that the order is forced. */
#include <string.h>

#include "kv_test.h"
#include "kv_wire.h"

#define POOL 64u
#define ID 77u

int main(void)
{
	struct xfer_kv_layout pl = kvt_layout(XFER_KV_GQA, 2, 1, 0, POOL, 0);
	struct xfer_kv_layout dl = kvt_layout(XFER_KV_GQA, 2, 2, 0, POOL, 0);
	void *pkv, *dkv;
	xfer_kv_prefiller_t *p = kvt_prefiller(&pl, &pkv, 0);
	xfer_kv_decoder_t *d = kvt_decoder(&dl, &dkv, 0, 4);
	struct xfer_attr a;
	kvt_attr(&a, 0);
	xfer_engine_t *raw = t_engine(&a);

	uint8_t paddr[XFER_ADDR_MAX], raddr[XFER_ADDR_MAX];
	int plen = xfer_engine_addr(xfer_kv_prefiller_engine(p), paddr, sizeof(paddr), NULL);
	int rlen = xfer_engine_addr(raw, raddr, sizeof(raddr), NULL);
	xfer_peer_t to_p;
	CHECK_OK(xfer_peer_add(raw, paddr, (size_t)plen, &to_p));

	/* Decode rank 1 gives up on request ID before it ever asked. */
	struct kv_msg m = {.type = KV_MSG_CANCEL, .dseq = 123, .id = ID, .addr = raddr,
			   .addr_len = (uint16_t)rlen};
	m.dst.tp_rank = 1;
	uint8_t buf[XFER_ADDR_MAX + 64], in[256];
	int len = xi_kv_msg_encode(&m, NULL, buf, sizeof(buf));
	CHECK(len > 0);
	CHECK_OK(xfer_send(raw, to_p, buf, (size_t)len, NULL));
	CHECK_RC(t_wait_cqe(raw, 5000).res, 0);
	struct xfer_msg_info info;
	CHECK(xfer_recv_wait(raw, in, sizeof(in), &info, 5000) == 1);
	struct kv_msg ack;
	CHECK_OK(xi_kv_msg_decode(in, info.len, &ack));
	CHECK(ack.type == KV_MSG_ACK && ack.dseq == 123);

	/* Decode rank 0 asks for it and gets it; the job does not wait for rank 1. */
	struct xfer_kv_rank r = {.addr = paddr, .addr_len = (size_t)plen, .layout = pl};
	uint32_t g;
	CHECK_OK(xfer_kv_dec_join(d, &r, 1, &g));
	uint64_t t0 = kvt_ms();
	CHECK_OK(xfer_kv_dec_admit(d, &(struct xfer_kv_request){.id = ID, .group = g, .tokens = 40}));
	uint32_t pages[16];
	bool done = false, got = false;
	while (!done || !got) {
		CHECK(kvt_ms() - t0 < 5000); /* the job timeout is 10 s */
		struct xfer_kv_pf_event ev;
		if (xfer_kv_pf_poll(p, &ev, 1, 1) == 1) {
			if (ev.type == XFER_KV_PF_NEW) {
				CHECK(ev.id == ID && ev.npages <= 16);
				for (uint32_t i = 0; i < ev.npages; i++)
					pages[i] = POOL - 1 - i;
				CHECK_OK(xfer_kv_pf_bind(p, ID, pages, ev.npages));
				for (uint32_t layer = 0; layer < KVT_LAYERS; layer++) {
					kvt_fill(&pl, pkv, pages, ev.npages, ID, layer);
					CHECK_OK(xfer_kv_pf_layers_done(p, ID, layer + 1));
				}
				uint8_t ctx[KVT_CTX];
				kvt_ctx(ctx, sizeof(ctx), ID);
				CHECK_OK(xfer_kv_pf_finish(p, ID, ctx, sizeof(ctx)));
			} else if (ev.type == XFER_KV_PF_DONE) {
				CHECK(ev.id == ID);
				CHECK_RC(ev.status, 0);
				done = true;
			}
		}
		struct xfer_kv_dec_event de;
		if (xfer_kv_dec_poll(d, &de, 1, 1) == 1) {
			CHECK(de.id == ID);
			CHECK_RC(de.status, 0);
			CHECK(kvt_verify(&dl, dkv, de.pages, de.npages, ID) == 0);
			CHECK_OK(xfer_kv_dec_release(d, ID));
			got = true;
		}
	}
	/* Rank 1's request, arriving after all, is ignored: no job, no answer. */
	m = (struct kv_msg){.type = KV_MSG_REQ, .dseq = 123, .id = ID + 1, .tokens = 4, .npages = 1,
			    .count = 1, .src = pl, .dst = kvt_layout(XFER_KV_GQA, 2, 2, 1, POOL, 0),
			    .addr = raddr, .addr_len = (uint16_t)rlen, .kv_desc = buf, .kv_desc_len = 8};
	uint32_t one = 0;
	len = xi_kv_msg_encode(&m, &one, buf + 512, sizeof(buf) - 512);
	CHECK(len > 0);
	CHECK_OK(xfer_send(raw, to_p, buf + 512, (size_t)len, NULL));
	CHECK_RC(t_wait_cqe(raw, 5000).res, 0);
	CHECK(xfer_recv_wait(raw, in, sizeof(in), &info, 300) == -ETIMEDOUT);
	struct xfer_kv_pf_event ev;
	CHECK(xfer_kv_pf_poll(p, &ev, 1, 100) == 0);

	xfer_engine_destroy(raw);
	xfer_kv_decoder_destroy(d);
	xfer_kv_prefiller_destroy(p);
	free(pkv);
	free(dkv);
	return 0;
}
