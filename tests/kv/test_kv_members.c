/* Many requests in flight between several prefillers and decoders, with the
 * membership changing underneath: two decoders keep a window of requests
 * open to two prefill instances; one instance leaves gracefully (finishing
 * what it accepted, refusing the rest, saying goodbye), a new one joins, and
 * the decoders never restart. Every completed request is verified.
 * Heartbeats stay off: leaving is announced, and on two loaded cores probes
 * that queue behind this much data would be late enough to look like death. */
#include <poll.h>
#include <string.h>

#include "kv_test.h"

#define NDEC 2
#define NPF 3 /* the third joins late */
#define POOL 4096u
#define WINDOW 12
#define TARGET 120
#define LATE_TARGET 15

enum { MSG_HALF = 10, MSG_DONE = 11, CMD_JOIN = 1, CMD_STOP = 2, CMD_START = 5 };

static struct xfer_kv_layout layout(uint32_t tp, uint32_t rank, uint32_t pages)
{
	return kvt_layout(XFER_KV_GQA, 2, tp, rank, pages, 0);
}

static int prefiller(int idx, int fd)
{
	if (idx == NPF - 1)
		CHECK(t_recv_u64(fd) == CMD_START); /* joins once the others are busy */
	struct xfer_kv_layout l = layout(1, 0, 2 * POOL);
	void *kv;
	xfer_kv_prefiller_t *p = kvt_prefiller(&l, &kv, 0);
	kvt_send_addr(fd, xfer_kv_prefiller_engine(p));
	struct kvt_serve o = {.layer_us = 200};
	kvt_prefill_serve(p, &l, kv, fd, &o);
	t_send_u64(fd, o.served);
	xfer_kv_prefiller_destroy(p);
	free(kv);
	return 0;
}

struct dec {
	xfer_kv_decoder_t *d;
	struct xfer_kv_layout l;
	void *kv;
	uint32_t group[NPF];
	bool usable[NPF];
	uint32_t ngroups, done[NPF], refused, inflight;
	uint64_t next_id;
};

static void join(struct dec *s, int fd)
{
	uint8_t addr[XFER_ADDR_MAX];
	struct xfer_kv_rank r = {.addr = addr, .layout = layout(1, 0, 2 * POOL)};
	r.addr_len = t_recv_blob(fd, addr, sizeof(addr));
	CHECK_OK(xfer_kv_dec_join(s->d, &r, 1, &s->group[s->ngroups]));
	s->usable[s->ngroups++] = true;
}

static void admit_some(struct dec *s, int rank, uint64_t *rs)
{
	for (uint32_t tries = 0; s->inflight < WINDOW && tries < 2 * NPF; tries++) {
		uint32_t k = (uint32_t)(s->next_id % s->ngroups);
		if (!s->usable[k]) {
			s->next_id++;
			continue;
		}
		struct xfer_kv_request r = {.id = (uint64_t)rank << 32 | s->next_id, .group = s->group[k],
					    .tokens = 1 + (uint32_t)(t_rand(rs) % 1200),
					    .timeout_ms = 20000};
		int rc = xfer_kv_dec_admit(s->d, &r);
		if (rc == -ESHUTDOWN) {
			/* That instance said goodbye: let it go, keep serving. */
			CHECK_OK(xfer_kv_dec_leave(s->d, s->group[k]));
			s->usable[k] = false;
			continue;
		}
		CHECK_OK(rc);
		s->next_id++;
		s->inflight++;
	}
}

static uint32_t group_index(struct dec *s, uint64_t id)
{
	/* Requests go round-robin, so the id says which group took it. */
	return (uint32_t)((id & 0xffffffffu) % s->ngroups);
}

static int decoder(int rank, int fd)
{
	struct dec s = {.l = layout(1, 0, POOL), .next_id = 1};
	s.d = kvt_decoder(&s.l, &s.kv, 0, 64);
	kvt_send_addr(fd, xfer_kv_decoder_engine(s.d));
	join(&s, fd);
	join(&s, fd);
	uint64_t rs = (uint64_t)rank + 99, total = 0;
	bool half_told = false;
	uint32_t groups_at_join = 0;
	uint64_t late_base = 0;
	for (;;) {
		bool enough = groups_at_join && total >= TARGET && s.done[NPF - 1] >= LATE_TARGET;
		if (enough && !s.inflight)
			break;
		if (!enough)
			admit_some(&s, rank, &rs);
		struct xfer_kv_dec_event ev[WINDOW];
		int n = xfer_kv_dec_poll(s.d, ev, WINDOW, 20);
		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			s.inflight--;
			if (ev[i].status == -ESHUTDOWN) {
				/* Refused by an instance on its way out. */
				s.refused++;
			} else {
				if (ev[i].status)
					fprintf(stderr, "decoder %d: request %llx (group index %u of %u): %s\n",
						rank, (unsigned long long)ev[i].id, group_index(&s, ev[i].id),
						s.ngroups, xfer_strerror(ev[i].status));
				CHECK_RC(ev[i].status, 0);
				CHECK(kvt_verify(&s.l, s.kv, ev[i].pages, ev[i].npages, ev[i].id) == 0);
				uint8_t ctx[KVT_CTX];
				kvt_ctx(ctx, sizeof(ctx), ev[i].id);
				CHECK(!memcmp(ctx, ev[i].ctx, sizeof(ctx)));
				total++;
				if ((ev[i].id & 0xffffffffu) >= late_base && groups_at_join)
					s.done[group_index(&s, ev[i].id)]++;
			}
			CHECK_OK(xfer_kv_dec_release(s.d, ev[i].id));
		}
		if (total >= TARGET / 3 && !half_told) {
			half_told = true;
			t_send_u64(fd, MSG_HALF);
		}
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, 0) == 1) {
			CHECK(t_recv_u64(fd) == CMD_JOIN);
			/* Ids from here on map to groups by the new count. */
			while (s.inflight) {
				int k = xfer_kv_dec_poll(s.d, ev, WINDOW, 20000);
				CHECK(k > 0);
				for (int i = 0; i < k; i++) {
					CHECK(ev[i].status == 0 || ev[i].status == -ESHUTDOWN);
					if (ev[i].status == 0)
						CHECK(kvt_verify(&s.l, s.kv, ev[i].pages, ev[i].npages, ev[i].id) == 0);
					total += ev[i].status == 0;
					CHECK_OK(xfer_kv_dec_release(s.d, ev[i].id));
					s.inflight--;
				}
			}
			join(&s, fd);
			groups_at_join = s.ngroups;
			s.next_id = (s.next_id / s.ngroups + 1) * s.ngroups;
			late_base = s.next_id;
		}
	}
	CHECK(!s.usable[0]); /* the instance that left was let go */
	CHECK(xfer_kv_dec_group_state(s.d, s.group[0]) == -ENOENT);
	struct xfer_kv_dec_stats st;
	xfer_kv_dec_stats(s.d, &st);
	fprintf(stderr, "decoder %d: %llu verified, %u refused by the leaving instance, %u on the late one\n",
		rank, (unsigned long long)total, s.refused, s.done[NPF - 1]);
	CHECK(st.revocations == 0 && st.msgs_dropped == 0);
	t_send_u64(fd, MSG_DONE);
	CHECK(t_recv_u64(fd) == CMD_STOP);
	xfer_kv_decoder_destroy(s.d);
	free(s.kv);
	return 0;
}

static int child(int idx, int fd, void *arg)
{
	(void)arg;
	return idx < NDEC ? decoder(idx, fd) : prefiller(idx - NDEC, fd);
}

static void forward(const int *fds, int from, uint64_t cmd)
{
	uint8_t addr[XFER_ADDR_MAX];
	size_t len = t_recv_blob(fds[from], addr, sizeof(addr));
	for (int d = 0; d < NDEC; d++) {
		if (cmd)
			t_send_u64(fds[d], cmd);
		t_send_blob(fds[d], addr, len);
	}
}

static int parent(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	uint8_t skip[XFER_ADDR_MAX];
	for (int d = 0; d < NDEC; d++)
		t_recv_blob(fds[d], skip, sizeof(skip));
	forward(fds, NDEC + 0, 0);
	forward(fds, NDEC + 1, 0);
	for (int d = 0; d < NDEC; d++)
		CHECK(t_recv_u64(fds[d]) == MSG_HALF);
	/* Requests in flight: the first instance leaves... */
	t_send_u64(fds[NDEC + 0], 1);
	CHECK(t_recv_u64(fds[NDEC + 0]) == 1);
	/* ...and a new one joins. */
	t_send_u64(fds[NDEC + 2], CMD_START);
	forward(fds, NDEC + 2, CMD_JOIN);
	for (int d = 0; d < NDEC; d++)
		CHECK(t_recv_u64(fds[d]) == MSG_DONE);
	uint64_t served = 0;
	for (int p = 0; p < NPF; p++) {
		t_send_u64(fds[NDEC + p], 0);
		served += t_recv_u64(fds[NDEC + p]);
	}
	CHECK(served >= NDEC * TARGET);
	for (int d = 0; d < NDEC; d++)
		t_send_u64(fds[d], CMD_STOP);
	return 0;
}

int main(void)
{
	return t_run_procs(NDEC + NPF, child, parent, NULL);
}
