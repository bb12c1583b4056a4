/* The MoE protocol end to end on the CPU path: N processes, each a rank,
 * dispatch and combine over many rounds of random routings (the largest
 * token count, empty rounds, experts that get nothing, every slot of a token
 * on one rank, skew that overflows the private slots), every expert row and
 * every combined token checked against the reference computed from all
 * ranks' inputs. Modes:
 *   bf16, fp8   the above (fp8 payloads carry their scales)
 *   kill        the last rank dies in the middle of a round: the others fail
 *               with an error that names it, within the deadline
 *   capacity    a round that gives an expert more rows than it holds fails
 *               on every rank with -ENOSPC naming the expert
 *   staged      bf16 with the four data buffers in (fake) GPU memory: the
 *               engine stages them through pinned mirrors and counts an
 *               immediate only after its notice's copy into the buffer, the
 *               engine path of a GPU (tests/gpu_fake/fake_cuda.c)
 *
 *   test_moe_cpu NPROCS MODE       (XFER_TEST_PROVIDER=shm|tcp)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "helpers.h"
#include "moe.h"
#include "moe_test.h"

#define SEED 0x5eedull
#define INFO_MAX 8192

static int W;
static const char *mode;

static bool is(const char *m)
{
	return !strcmp(mode, m);
}

static struct xfer_moe_config config(uint32_t rank)
{
	struct xfer_moe_config c;
	xfer_moe_config_init(&c);
	c.world_size = (uint32_t)W;
	c.rank = rank;
	c.num_experts = 4u * (uint32_t)W;
	c.topk = W == 2 ? 6 : 4; /* more slots than ranks, and fewer */
	c.max_tokens = 24;
	c.private_tokens = 5; /* the skewed rounds overflow it */
	c.hidden = 64;
	if (is("fp8")) {
		c.hidden = 256;
		c.dispatch_bytes = 1;
		c.scales = 1;
	}
	if (W == 3) {
		c.layout = XFER_MOE_PACKED;
		c.expert_align = 4;
	}
	c.timeout_ms = is("kill") ? 3000 : 30000;
	if (is("capacity")) {
		c.expert_capacity = 5;
		c.overflow_tokens = XFER_MOE_AUTO;
	}
	xfer_moe_config_resolve(&c);
	return c;
}

struct outbuf {
	struct xfer_moe_expert_out o;
	uint16_t *y, *out;
};

static void out_alloc(const struct xfer_moe_config *c, struct outbuf *b)
{
	struct xfer_moe_sizes z;
	CHECK_OK(xfer_moe_sizes(c, &z));
	uint64_t rows = z.expert_rows;
	b->o.x = calloc(rows * c->hidden * c->dispatch_bytes, 1);
	b->o.scales = calloc(rows * (c->hidden / XFER_MOE_SCALE_BLOCK) + 1, sizeof(float));
	b->o.counts = calloc(z.local_experts, sizeof(int32_t));
	b->o.offsets = calloc(z.local_experts + 1, sizeof(int32_t));
	b->o.src_rank = calloc(rows, sizeof(int32_t));
	b->o.src_token = calloc(rows, sizeof(int32_t));
	b->y = calloc(rows * c->hidden, sizeof(uint16_t));
	b->out = calloc((size_t)c->max_tokens * c->hidden, sizeof(uint16_t));
	CHECK(b->o.x && b->o.scales && b->o.counts && b->o.offsets && b->y && b->out);
	if (!c->scales)
		b->o.scales = NULL;
}

/* The experts of this rank at work: every row through mt_expert. */
static void compute(const struct xfer_moe_config *c, struct outbuf *b)
{
	uint32_t L = c->num_experts / c->world_size, rowb = c->hidden * c->dispatch_bytes;
	for (uint32_t le = 0; le < L; le++)
		for (int32_t r = b->o.offsets[le]; r < b->o.offsets[le] + b->o.counts[le]; r++)
			mt_expert(c, c->rank * L + le, (const uint8_t *)b->o.x + (size_t)r * rowb,
				  b->y + (size_t)r * c->hidden);
}

/* Capacity mode: every token of every rank to expert 0 (and nothing else). */
static void gen_skew(const struct xfer_moe_config *c, uint32_t rank, struct mt_tokens *t)
{
	mt_gen(c, SEED, 1, rank, c->max_tokens, t);
	for (uint32_t i = 0; i < c->max_tokens * c->topk; i++)
		t->idx[i] = i % c->topk ? -1 : 0;
}

static int run_rank(uint32_t rank, xfer_moe_t *m, const struct xfer_moe_config *c)
{
	struct outbuf b;
	out_alloc(c, &b);
	struct mt_tokens *all = calloc((size_t)W, sizeof(*all));
	int rounds = is("kill") ? 8 : is("capacity") ? 1 : 24, errors = 0;
	uint64_t t_kill = 0;
	for (int round = 1; round <= rounds; round++) {
		for (uint32_t s = 0; s < (uint32_t)W; s++) {
			if (is("capacity"))
				gen_skew(c, s, &all[s]);
			else
				mt_gen(c, SEED, (uint32_t)round, s, mt_ntok(c, SEED, (uint32_t)round, s), &all[s]);
		}
		struct xfer_moe_tokens tok = {.n = all[rank].n, .x = all[rank].x,
					      .scales = all[rank].scales, .topk_idx = all[rank].idx,
					      .idx_bytes = 4};
		bool killer = is("kill") && rank == (uint32_t)W - 1 && round == 3;
		if (is("kill") && round == 3)
			t_kill = xi_moe_now_ns();
		int rc = xfer_moe_cpu_dispatch_send(m, &tok);
		if (killer)
			_exit(0); /* mid-round: route and tokens sent, nothing received */
		if (!rc)
			rc = xfer_moe_cpu_dispatch_recv(m, &b.o);
		if (!rc)
			errors += mt_check_dispatch(c, rank, all, &b.o);
		if (!rc && round % 3 != 2) {
			compute(c, &b);
			rc = xfer_moe_cpu_combine_send(m, b.y);
			if (!rc)
				rc = xfer_moe_cpu_combine_recv(m, all[rank].weights, b.out);
			if (!rc)
				errors += mt_check_combine(c, &all[rank], b.out);
		}
		for (uint32_t s = 0; s < (uint32_t)W; s++)
			mt_free(&all[s]);
		if (rc) {
			char msg[256];
			uint32_t who;
			int st = xfer_moe_status(m, msg, sizeof(msg), &who);
			fprintf(stderr, "rank %u round %d: %s (%s)\n", rank, round, xfer_strerror(rc), msg);
			if (is("kill")) {
				double s = (double)(xi_moe_now_ns() - t_kill) / 1e9;
				CHECK(st == rc && who == (uint32_t)W - 1);
				char want[32];
				snprintf(want, sizeof(want), "rank %d", W - 1);
				CHECK(strstr(msg, want));
				CHECK(s < c->timeout_ms / 1000.0 + 2.0);
				printf("rank %u: failed %.2f s after rank %d died: %s\n", rank, s, W - 1, msg);
				return errors;
			}
			if (is("capacity")) {
				CHECK(rc == -ENOSPC && st == -ENOSPC && strstr(msg, "expert 0"));
				printf("rank %u: %s\n", rank, msg);
				return errors;
			}
			return 1;
		}
	}
	if (is("kill") || is("capacity")) {
		fprintf(stderr, "rank %u: every round succeeded; a failure was due\n", rank);
		return 1;
	}
	struct xfer_moe_stats st;
	xfer_moe_get_stats(m, &st);
	if (rank == 0)
		printf("rank 0: %d rounds, %llu combines, %llu private and %llu overflow records out, "
		       "proxy busy %.1f us/round\n", rounds, (unsigned long long)st.combines,
		       (unsigned long long)st.private_records, (unsigned long long)st.overflow_records,
		       st.rounds ? (double)st.busy_ns / 1e3 / (double)st.rounds : 0.0);
	CHECK(st.rounds == (uint64_t)rounds && st.overflow_records > 0);
	free(all);
	return errors;
}

static int child(int idx, int fd, void *arg)
{
	(void)arg;
	uint32_t rank = (uint32_t)idx;
	struct xfer_moe_config c = config(rank);
	struct xfer_attr a;
	t_attr(&a);
	if (is("kill")) {
		a.heartbeat_ms = 200; /* 2 s: not so tight that a loaded machine misses it */
		a.heartbeat_misses = 10;
	}
	xfer_moe_t *m = NULL;
	struct xfer_moe_buffers gb = {0}, *bufs = NULL;
	if (is("staged")) {
		/* The GPU's buffers (moe_host.cu's create): data in device memory,
		 * route vectors and control words in pinned host memory. */
		struct xfer_moe_sizes z;
		CHECK_OK(xfer_moe_sizes(&c, &z));
		fake_cuda_install();
		setenv("XFER_GPU_IPC", "0", 1); /* through the NICs, as the device run's engine path */
		CHECK((gb.send = fake_cuda_alloc(z.send_bytes, 0)) != NULL);
		CHECK((gb.recv = fake_cuda_alloc(z.recv_bytes, 0)) != NULL);
		CHECK((gb.comb_send = fake_cuda_alloc(z.comb_send_bytes, 0)) != NULL);
		CHECK((gb.comb_recv = fake_cuda_alloc(z.comb_recv_bytes, 0)) != NULL);
		bufs = &gb;
	}
	int rc = xfer_moe_create(&c, &a, bufs, &m);
	uint8_t *info = malloc(INFO_MAX);
	int n = rc ? 0 : xfer_moe_local_info(m, info, INFO_MAX, NULL);
	CHECK(n >= 0);
	t_send_blob(fd, info, (size_t)n); /* empty: this provider is not here */
	uint8_t *infos = malloc((size_t)W * INFO_MAX);
	const void *ptrs[64];
	size_t lens[64];
	for (int r = 0; r < W; r++) {
		lens[r] = t_recv_blob(fd, infos + (size_t)r * INFO_MAX, INFO_MAX);
		ptrs[r] = infos + (size_t)r * INFO_MAX;
		if (!lens[r])
			return T_SKIP;
	}
	CHECK_OK(xfer_moe_connect(m, ptrs, lens));
	int errors = run_rank(rank, m, &c);
	xfer_moe_destroy(m);
	if (bufs) {
		struct fake_cuda_counts fc = fake_cuda_counts();
		if (rank == 0)
			printf("rank 0: %llu pinned mirrors, %llu staging copies out, %llu into the buffers\n",
			       (unsigned long long)fc.host_allocs, (unsigned long long)fc.dtoh,
			       (unsigned long long)fc.htod);
		CHECK(fc.host_allocs >= 4 && fc.dtoh > 0 && fc.htod > 0);
		fake_cuda_free(gb.send);
		fake_cuda_free(gb.recv);
		fake_cuda_free(gb.comb_send);
		fake_cuda_free(gb.comb_recv);
	}
	free(info);
	free(infos);
	if (errors)
		fprintf(stderr, "rank %u: %d mismatches\n", rank, errors);
	return errors ? 1 : 0;
}

static int parent(int n, const int *fds, void *arg)
{
	(void)arg;
	uint8_t *infos = malloc((size_t)n * INFO_MAX);
	size_t lens[64];
	bool skip = false;
	for (int i = 0; i < n; i++) {
		lens[i] = t_recv_blob(fds[i], infos + (size_t)i * INFO_MAX, INFO_MAX);
		skip |= !lens[i];
	}
	for (int i = 0; i < n; i++)
		for (int r = 0; r < n; r++)
			t_send_blob(fds[i], infos + (size_t)r * INFO_MAX, skip ? 0 : lens[r]);
	free(infos);
	return skip ? T_SKIP : 0;
}

int main(int argc, char **argv)
{
	W = argc > 1 ? atoi(argv[1]) : 2;
	mode = argc > 2 ? argv[2] : "bf16";
	CHECK(W >= 1 && W <= 16);
	int rc = t_run_procs(W, child, parent, NULL);
	if (rc == T_SKIP)
		printf("SKIP: provider %s is not available\n", t_provider());
	else if (!rc)
		printf("moe cpu %s: %d ranks on %s passed\n", mode, W, t_provider());
	return rc;
}
