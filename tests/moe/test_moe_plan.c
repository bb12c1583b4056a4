/* The MoE module's arithmetic, checked against brute force: configuration
 * rules, buffer sizes, the sender's routing (records, pair ordinals, combine
 * rows), the receiver's plan (expert rows, record places, combine stream) and
 * the sender's overflow offsets, over random routings of every shape the
 * protocol tests use, for several world sizes and host groupings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "moe.h"
#include "moe_test.h"

static struct xfer_moe_config base_cfg(uint32_t W, uint32_t L, uint32_t K, uint32_t T)
{
	struct xfer_moe_config c;
	xfer_moe_config_init(&c);
	c.world_size = W;
	c.num_experts = W * L;
	c.topk = K;
	c.hidden = 32;
	c.max_tokens = T;
	return c;
}

static void expect_bad(struct xfer_moe_config c, const char *word)
{
	const char *why = xfer_moe_config_why(&c);
	if (!why || !strstr(why, word)) {
		fprintf(stderr, "config rule: got \"%s\", want one about \"%s\"\n", why ? why : "(valid)", word);
		exit(1);
	}
	CHECK(xfer_moe_config_check(&c) == -EINVAL);
}

static void test_config(void)
{
	struct xfer_moe_config c;
	xfer_moe_config_init(&c);
	CHECK(xfer_moe_config_check(&c) == -EINVAL);
	c = base_cfg(8, 32, 8, 128);
	CHECK(xfer_moe_config_check(&c) == 0 && !xfer_moe_config_why(&c));
	struct xfer_moe_config b = c;
	b.num_experts = 255;
	expect_bad(b, "multiple of world_size");
	b = c, b.rank = 8;
	expect_bad(b, "rank");
	b = c, b.topk = 33;
	expect_bad(b, "topk");
	b = c, b.hidden = 40;
	expect_bad(b, "hidden");
	b = c, b.dispatch_bytes = 4;
	expect_bad(b, "dispatch_bytes");
	b = c, b.scales = 1;
	expect_bad(b, "fp8");
	b = c, b.dispatch_bytes = 1, b.scales = 1, b.hidden = 64;
	expect_bad(b, "128");
	b = c, b.max_tokens = 0;
	expect_bad(b, "max_tokens");
	b = c, b.private_tokens = 129;
	expect_bad(b, "private_tokens");
	b = c, b.expert_align = 4;
	expect_bad(b, "expert_align");
	b = c, b.layout = 2;
	expect_bad(b, "layout");
	b = c, b.expert_capacity = 0;
	expect_bad(b, "expert_capacity");
	b = c, b.combine_bytes = 4;
	expect_bad(b, "combine_bytes");
	b = c, b.layout = XFER_MOE_PADDED, b.expert_capacity = 1u << 30;
	expect_bad(b, "2^31");
}

/* The decode shape of the issue: EP8, 256 experts, top-8, hidden 7168, fp8. */
static void test_sizes(void)
{
	struct xfer_moe_config c = base_cfg(8, 32, 8, 128);
	c.hidden = 7168;
	c.dispatch_bytes = 1;
	c.scales = 1;
	struct xfer_moe_sizes z;
	CHECK_OK(xfer_moe_sizes(&c, &z));
	CHECK(z.local_experts == 32 && z.payload_bytes == 7168 && z.scale_bytes == 224);
	CHECK(z.meta_bytes == 80 && z.record_bytes == 7472 && z.combine_row_bytes == 14336);
	CHECK(z.route_words == 276 && z.remote_ranks == 7);
	CHECK(z.send_records == 128 * 8);
	CHECK(z.recv_records == 8 * 128 + 0); /* P = T: nothing overflows */
	CHECK(z.expert_rows == 32 * 8 * 128);
	CHECK(z.comb_send_rows == 7 * 128 * 8 && z.comb_recv_rows == 128 * 8);
	CHECK(z.send_bytes == z.send_records * 7472 && z.route_table_bytes == 2ull * 8 * 276 * 4);
	/* all on one host: nothing goes through the engine */
	uint32_t one[8] = {0};
	c.host_of = one;
	CHECK_OK(xfer_moe_sizes(&c, &z));
	CHECK(z.remote_ranks == 0 && z.recv_records == 0 && z.comb_send_rows == 0);
	/* prefill: 4096 tokens, packed, P = 256 and the rest overflow */
	c.host_of = NULL;
	c.max_tokens = 4096;
	c.layout = XFER_MOE_PACKED;
	CHECK_OK(xfer_moe_sizes(&c, &z));
	CHECK(z.recv_records == 8ull * 256 + 8ull * (4096 - 256));
	CHECK(z.expert_rows == 8ull * 4096 * 8);
}

static int64_t ix(const struct mt_tokens *t, uint32_t K, uint32_t tok, uint32_t k)
{
	return t->idx[(size_t)tok * K + k];
}

/* Sender side: every number xi_moe_route_compute gives, by counting. */
static void check_route(const struct xfer_moe_config *c, const struct mt_tokens *t,
			const struct moe_route *r, const uint32_t *rv)
{
	uint32_t K = c->topk, E = c->num_experts, W = c->world_size, L = E / W;
	uint32_t *cnt = calloc(E, 4), so = 0, cbo = 0;
	for (uint32_t tok = 0; tok < t->n; tok++)
		for (uint32_t k = 0; k < K; k++)
			if (ix(t, K, tok, k) >= 0)
				cnt[ix(t, K, tok, k)]++;
	/* records: per destination, the tokens with a slot there, in order */
	for (uint32_t d = 0; d < W; d++) {
		uint32_t nrec = 0, np = 0;
		for (uint32_t tok = 0; tok < t->n; tok++) {
			bool any = false;
			uint32_t q = 0;
			for (uint32_t k = 0; k < K; k++) {
				int64_t e = ix(t, K, tok, k);
				size_t s = (size_t)tok * K + k;
				if (e < 0 || (uint32_t)e / L != d)
					continue;
				CHECK(r->rec[s] == (int32_t)(so + nrec));
				CHECK(r->lead[s] == (any ? 0 : 1));
				CHECK(r->q[s] == q);
				CHECK(r->pb[s] + r->q[s] == np);
				CHECK(r->comb[s] == (int32_t)(cbo + np));
				any = true;
				q++;
				np++;
			}
			nrec += any;
		}
		CHECK(rv[moe_rv_rec(E, d)] == nrec && rv[moe_rv_pairs(E, W, d)] == np);
		CHECK(r->so[d] == so && r->cbo[d] == cbo);
		so += nrec;
		cbo += np;
	}
	/* pair ordinals per expert in (token, slot) order; empty slots */
	uint32_t *seen = calloc(E, 4);
	for (uint32_t tok = 0; tok < t->n; tok++)
		for (uint32_t k = 0; k < K; k++) {
			int64_t e = ix(t, K, tok, k);
			size_t s = (size_t)tok * K + k;
			if (e < 0) {
				CHECK(r->rec[s] == -1 && r->comb[s] == -1 && !r->lead[s]);
				continue;
			}
			CHECK(r->j[s] == seen[e]++);
		}
	for (uint32_t e = 0; e < E; e++)
		CHECK(rv[e] == cnt[e] && seen[e] == cnt[e]);
	CHECK(rv[moe_rv_ntok(E, W)] == t->n);
	free(cnt), free(seen);
}

/* Receiver side, for every receiver: rows by brute force in (source, token,
 * slot) order, record places, combine offsets against the senders' own. */
static void check_plans(const struct xfer_moe_config *cin, const struct mt_tokens *all,
			struct moe_route *routes, uint32_t **rows, uint32_t round)
{
	uint32_t K = cin->topk, E = cin->num_experts, W = cin->world_size, L = E / W;
	uint32_t P = cin->private_tokens;
	uint64_t *ovf_dst = calloc((size_t)W * W, sizeof(uint64_t));
	uint32_t bad = 0;
	for (uint32_t s = 0; s < W; s++) {
		CHECK_OK(xi_moe_route_valid(cin, round, s, rows[s]));
		struct xfer_moe_config cs = *cin;
		cs.rank = s;
		CHECK_OK(xi_moe_plan_send(&cs, s, (const uint32_t *const *)rows, ovf_dst + (size_t)s * W, &bad));
	}
	for (uint32_t me = 0; me < W; me++) {
		struct xfer_moe_config c = *cin;
		c.rank = me;
		struct xfer_moe_sizes z;
		CHECK_OK(xfer_moe_sizes(&c, &z));
		struct moe_plan p;
		CHECK_OK(xi_moe_plan_alloc(&p, W, L));
		CHECK_OK(xi_moe_plan_recv(&c, &z, me, (const uint32_t *const *)rows, &p, &bad));
		uint32_t off = 0;
		for (uint32_t le = 0; le < L; le++) {
			uint32_t e = me * L + le, nrow = 0;
			uint32_t base = c.layout == XFER_MOE_PADDED ? le * c.expert_capacity : off;
			CHECK(p.offsets[le] == base);
			for (uint32_t s = 0; s < W; s++)
				for (uint32_t tok = 0; tok < all[s].n; tok++)
					for (uint32_t k = 0; k < K; k++) {
						size_t q = (size_t)tok * K + k;
						if (ix(&all[s], K, tok, k) != (int64_t)e)
							continue;
						CHECK(p.base[(size_t)s * L + le] + routes[s].j[q] == base + nrow);
						nrow++;
					}
			CHECK(p.counts[le] == nrow);
			off += (nrow + c.expert_align - 1) / c.expert_align * c.expert_align;
		}
		uint64_t ovf = 0, q = 0;
		for (int pass = 0; pass < 2; pass++)
			for (uint32_t s = 0; s < W; s++) {
				bool remote = s != me && moe_host(c.host_of, s) != moe_host(c.host_of, me);
				if (remote != (pass == 0))
					continue;
				CHECK(p.qbase[s] == q);
				q += p.pr[s];
			}
		CHECK(p.q_total == q);
		for (uint32_t s = 0; s < W; s++) {
			bool remote = s != me && moe_host(c.host_of, s) != moe_host(c.host_of, me);
			CHECK(p.c[s] == rows[s][moe_rv_rec(E, me)] && p.pr[s] == rows[s][moe_rv_pairs(E, W, me)]);
			CHECK(p.cb[s] == routes[s].cbo[me]);
			if (remote) {
				CHECK(p.first[s] == (uint64_t)s * P);
				CHECK(p.ovf[s] == (uint64_t)W * P + ovf);
				CHECK(ovf_dst[(size_t)s * W + me] == p.ovf[s]);
				ovf += p.c[s] > P ? p.c[s] - P : 0;
			} else {
				CHECK(p.first[s] == routes[s].so[me]);
			}
		}
		CHECK(p.ovf_total == ovf && ovf <= c.overflow_tokens);
		xi_moe_plan_free(&p);
	}
	free(ovf_dst);
}

static void run_case(struct xfer_moe_config c, const uint32_t *host_of, int rounds)
{
	xfer_moe_config_resolve(&c);
	uint32_t W = c.world_size, K = c.topk, T = c.max_tokens;
	c.host_of = host_of;
	struct mt_tokens *all = calloc(W, sizeof(*all));
	struct moe_route *routes = calloc(W, sizeof(*routes));
	uint32_t **rows = calloc(W, sizeof(*rows));
	uint32_t RV = moe_route_words(c.num_experts, W);
	for (uint32_t s = 0; s < W; s++) {
		CHECK_OK(xi_moe_route_alloc(&routes[s], T, K, W));
		rows[s] = calloc(RV, 4);
	}
	for (int round = 1; round <= rounds; round++) {
		for (uint32_t s = 0; s < W; s++) {
			mt_gen(&c, 42, (uint32_t)round, s, mt_ntok(&c, 42, (uint32_t)round, s), &all[s]);
			/* int64 indices on odd rounds, like torch's default */
			if (round % 2) {
				int64_t *i64 = malloc(((size_t)all[s].n * K + 1) * 8);
				for (size_t i = 0; i < (size_t)all[s].n * K; i++)
					i64[i] = all[s].idx[i];
				xi_moe_route_compute(&c, (uint32_t)round, all[s].n, i64, 8, &routes[s], rows[s]);
				free(i64);
			} else {
				xi_moe_route_compute(&c, (uint32_t)round, all[s].n, all[s].idx, 4, &routes[s], rows[s]);
			}
			check_route(&c, &all[s], &routes[s], rows[s]);
		}
		check_plans(&c, all, routes, rows, (uint32_t)round);
		for (uint32_t s = 0; s < W; s++)
			mt_free(&all[s]);
	}
	/* a route vector that lies is refused */
	rows[0][moe_rv_stamp(c.num_experts, W)]++;
	CHECK(xi_moe_route_valid(&c, (uint32_t)rounds, 0, rows[0]) == -ESTALE);
	rows[0][moe_rv_stamp(c.num_experts, W)]--;
	rows[0][moe_rv_rec(c.num_experts, 0)] += T + 1;
	CHECK(xi_moe_route_valid(&c, (uint32_t)rounds, 0, rows[0]) == -EPROTO);
	rows[0][moe_rv_rec(c.num_experts, 0)] -= T + 1;
	rows[0][0] += 1;
	CHECK(xi_moe_route_valid(&c, (uint32_t)rounds, 0, rows[0]) == -EPROTO);
	rows[0][0] -= 1;
	for (uint32_t s = 0; s < W; s++) {
		xi_moe_route_free(&routes[s]);
		free(rows[s]);
	}
	free(all), free(routes), free(rows);
}

/* Capacity: an expert given more rows than the layout holds, and an overflow
 * area too small, are refused naming the expert and the rank. */
static void test_capacity(void)
{
	struct xfer_moe_config c = base_cfg(2, 2, 2, 8);
	c.expert_capacity = 3;
	c.private_tokens = 1;
	c.overflow_tokens = 2;
	xfer_moe_config_resolve(&c);
	uint32_t RV = moe_route_words(4, 2);
	uint32_t *rows[2] = {calloc(RV, 4), calloc(RV, 4)};
	struct moe_route r;
	CHECK_OK(xi_moe_route_alloc(&r, 8, 2, 2));
	/* rank 0: 4 tokens, all to experts 2 and 3 (rank 1); rank 1: nothing */
	int32_t idx[8] = {2, 3, 2, 3, 2, 3, 2, 3};
	xi_moe_route_compute(&c, 1, 4, idx, 4, &r, rows[0]);
	xi_moe_route_compute(&c, 1, 0, idx, 4, &r, rows[1]);
	struct moe_plan p;
	struct xfer_moe_sizes z;
	c.rank = 1;
	CHECK_OK(xfer_moe_sizes(&c, &z));
	CHECK_OK(xi_moe_plan_alloc(&p, 2, 2));
	uint32_t why = 0;
	/* overflow: 4 records, 1 private, 3 overflow > 2 */
	CHECK(xi_moe_plan_recv(&c, &z, 1, (const uint32_t *const *)rows, &p, &why) == -ENOSPC && why == 1);
	uint64_t dst[2];
	CHECK(xi_moe_plan_send(&c, 0, (const uint32_t *const *)rows, dst, &why) == -ENOSPC && why == 1);
	/* rows: expert 2 gets 4 > 3 */
	c.overflow_tokens = 8;
	CHECK(xi_moe_plan_recv(&c, &z, 1, (const uint32_t *const *)rows, &p, &why) == -ENOSPC && why == 2);
	c.expert_capacity = 4;
	CHECK_OK(xfer_moe_sizes(&c, &z));
	CHECK_OK(xi_moe_plan_recv(&c, &z, 1, (const uint32_t *const *)rows, &p, &why));
	/* packed, aligned to 4: 4 + 4 rows fit in 8, not in 7 */
	c.layout = XFER_MOE_PACKED;
	c.expert_align = 4;
	c.expert_capacity = 7;
	CHECK(xi_moe_plan_recv(&c, &z, 1, (const uint32_t *const *)rows, &p, &why) == -ENOSPC && why == 3);
	c.expert_capacity = 8;
	CHECK_OK(xfer_moe_sizes(&c, &z));
	CHECK_OK(xi_moe_plan_recv(&c, &z, 1, (const uint32_t *const *)rows, &p, &why));
	CHECK(p.offsets[0] == 0 && p.offsets[1] == 4 && p.offsets[2] == 8);
	xi_moe_plan_free(&p);
	xi_moe_route_free(&r);
	free(rows[0]), free(rows[1]);
}

int main(void)
{
	test_config();
	test_sizes();
	test_capacity();
	/* world sizes, experts per rank, top-k above and below the world size */
	run_case(base_cfg(1, 4, 2, 16), NULL, 8);
	run_case(base_cfg(2, 4, 4, 32), NULL, 20);
	run_case(base_cfg(3, 2, 4, 17), NULL, 20);
	run_case(base_cfg(4, 8, 8, 64), NULL, 20);
	run_case(base_cfg(8, 32, 8, 128), NULL, 10);
	struct xfer_moe_config c = base_cfg(4, 3, 5, 40);
	c.private_tokens = 3; /* overflow in most rounds */
	run_case(c, NULL, 20);
	c.private_tokens = 0; /* everything through the overflow area */
	run_case(c, NULL, 10);
	c = base_cfg(4, 4, 6, 33);
	c.layout = XFER_MOE_PACKED;
	c.expert_align = 8;
	c.private_tokens = 5;
	run_case(c, NULL, 20);
	/* two hosts of two ranks; then 8 ranks on hosts of 3, 3 and 2 */
	uint32_t hosts4[4] = {7, 7, 9, 9}, hosts8[8] = {0, 0, 0, 1, 1, 1, 2, 2};
	c = base_cfg(4, 4, 4, 24);
	c.private_tokens = 4;
	run_case(c, hosts4, 20);
	c = base_cfg(8, 4, 8, 32);
	c.private_tokens = 2;
	run_case(c, hosts8, 12);
	printf("moe plan: routes, receive plans and overflow offsets agree with brute force\n");
	return 0;
}
