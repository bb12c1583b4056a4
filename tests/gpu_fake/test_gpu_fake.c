/* The GPU paths on a host without a GPU, through the fake driver of
 * fake_cuda.c ("device memory" is host memory; same-host IPC maps it from
 * the other process). What this proves: the engine's staging, notices, IPC
 * parking and their completion and immediate accounting, over the real
 * providers. What it cannot: anything about a real GPU or copy engine.
 *
 *   scatter-staged | scatter-ipc  root scatters to 3 members, each with a
 *       GPU and a host region; entries of every length class, len 0 ones
 *       included, first from a GPU source, then from a host source
 *   write-staged | write-ipc  a single and a paged write from a GPU source
 *       into a GPU region; through IPC the paged write is one launch of the
 *       gather/scatter kernel (run on the CPU by the fake driver when its
 *       event is queried) where the library embeds the kernels, else copies
 *   write-engine  write-ipc with XFER_GPU_KERNEL=0: the copy engine's pages
 *   write-staged-engine  write-staged with XFER_GPU_KERNEL=0 (page by page)
 *   write-big | write-big-staged  write-ipc / write-staged with 16 KiB pages:
 *       their launches (the paged write's, the staging gather, the landing's
 *       scatter) go to the bulk kernel by default, 4 KiB ones to tile's
 *   write-huge  write-ipc with 2 MiB pages, 128 MiB in the paged write: above
 *       64 MiB a launch goes to the tile kernel again
 *   write-device  write-ipc with XFER_GPU_INDEX=device (page lists copied to
 *       device memory first; write-ipc reads them in place)
 *   write-ahead  a 32 MiB write whose copy is held: the writer announces it,
 *       so the target's wait for its immediate spins (no voluntary context
 *       switch) until the count comes, for at most 100 ms, then sleeps
 *   write-event  write-ipc with XFER_GPU_DONE=event: copies' ends seen by
 *       event queries (by default, and in write-ipc, each copy's end is
 *       read from a word its stream writes after it: one write per copy,
 *       and no event query finds a copy done)
 *   write-ring  12 paged writes of 60,000 pages with events held: the copy
 *       kernel's page-list ring fills, posting stalls, the ring wraps
 *   (in write-ipc and write-staged, and their variants, the writer's copy
 *   ring events are made at registration, none on the way of its copies;
 *   in every write mode neither worker calls cuStreamSynchronize: the
 *   source's staging copies and the target's copies of noticed ranges from
 *   its mirror to the GPU complete as polled events)
 *   write-batch | write-batch-off  40 calls of four kinds queued behind a
 *       busy worker share kernel launches (or, with XFER_GPU_BATCH=0, do not),
 *       and the notices of copies that finish together go as one (one per
 *       call with XFER_GPU_BATCH=0, or XFER_NOTICE_MERGE=0: write-batch-nomerge)
 *   write-batch-staged  the same 40 calls through the host mirrors with
 *       XFER_GPU_STAGE=kernel and XFER_GPU_STAGE_AHEAD=1: the staging copies
 *       of the calls queued behind the first start while it waits and share
 *       launches (fewer launches than aligned calls), every byte lands once
 *   write-batch-staged-dtoh  the same with XFER_GPU_STAGE=kernel-dtoh (the
 *       default: stagings by kernel jobs, landings by the copy engine)
 *   land-batch | land-each  the worker's GPU copy engine alone (no engine,
 *       no peer): landings (mirror -> device copies) of copies ended one
 *       after the other wait for the flush and go to the driver as one
 *       batched copy with one event (or, XFER_GPU_LAND=each, one copy each);
 *       a device copy in between sends the open batch first, a copy of more
 *       pieces than a batch holds is split, a landing over 256 KiB goes
 *       alone, every copy reported once, in order, with its bytes in place
 *   write-many[-staged[-small]]  300 writes in a row; staged, each op staged
 *       once as a copy-engine copy (XFER_GPU_STAGE=engine), with the default
 *       XFER_GPU_STAGE_AHEAD=next or =small
 *   write-early-staged[-all|-none|-next|-next-small]  which staging copies
 *       start behind a held FIFO head (see "early staging" below)
 *   write-batch-warp | write-batch-bulk  write-batch with XFER_GPU_PAGES=warp
 *       (every launch by the warp kernel; by default the tile kernel's) or
 *       =bulk (aligned launches by the bulk kernel, the unaligned one by the
 *       warp kernel)
 *   scatter-cut  a scatter whose same-host GPU copies outlive its deadline:
 *       it completes with -ETIMEDOUT, and once the copies finish no
 *       immediate is counted for them (host entries still count theirs)
 *   write-notice  a same-host GPU write's completion and waits: a wait
 *       spins (no voluntary context switch) while the copy is in flight,
 *       keeps its timeout, and sleeps once the copy stopped moving for
 *       100 ms (events held: a wedged GPU); the write completes while the
 *       target process is stopped (the op does not wait for the target to
 *       take its notice); 2,000 writes in a row reuse the notices' contexts
 *       (none leaks), and the target counts every immediate exactly once
 * "-staged" sets XFER_GPU_IPC=0 (through the peers' host mirrors). */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "gpu/fatbin.h"
#include "gpu/gpu_copy.h"
#include "helpers.h"

#define NCHILD 3
#define SLEN (1u << 20)
#define DLEN (1u << 20)
#define IMM_BASE 0x6a0

static bool staged, no_kernel, done_flag;

/* -------------------------------------------------------------- scatter */

static const uint64_t lens[] = {4096, 0, 0, 1, 100000, 65537, 777, 3}; /* 0: host (k=1,9) and GPU (k=2,10) */

/* Entry k: member k % NCHILD; even k into the member's GPU region, odd k
 * into its host region; each entry its own slice of dst. */
#define NENT 14
static struct xfer_scatter_entry entry(int k)
{
	struct xfer_scatter_entry en = {0};
	en.member = (uint32_t)(k % NCHILD);
	en.len = lens[k % 8];
	en.src_off = (uint64_t)k * 70001;
	en.dst_off = (uint64_t)(k / NCHILD) * 110000 + 8;
	return en;
}

static bool to_gpu(int k)
{
	return k % 2 == 0;
}

/* This process's engine, with the fake driver installed before it opens,
 * connected to the partner process over fd (peer: NULL when unused). */
static xfer_engine_t *fake_engine(int fd, xfer_peer_t *peer)
{
	fake_cuda_install();
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t p = t_connect(e, fd);
	if (peer)
		*peer = p;
	return e;
}

static int scatter_child(int idx, int fd, void *arg)
{
	(void)arg;
	xfer_engine_t *e = fake_engine(fd, NULL);
	uint8_t *gpu = fake_cuda_alloc(DLEN, 1), *host = calloc(1, DLEN);
	uint8_t *want = malloc(SLEN);
	CHECK(gpu && host && want);
	xfer_mr_t *gmr, *hmr;
	CHECK_OK(xfer_mr_reg(e, gpu, DLEN, &gmr));
	CHECK_OK(xfer_mr_reg(e, host, DLEN, &hmr));
	CHECK(xfer_mr_is_gpu(gmr) == 1 && xfer_mr_is_gpu(hmr) == -1);
	t_send_desc(fd, gmr);
	t_send_desc(fd, hmr);
	uint32_t mine = 0;
	for (int k = 0; k < NENT; k++)
		mine += entry(k).member == (uint32_t)idx;
	for (int round = 0; round < 2; round++) {
		memset(gpu, 0, DLEN);
		memset(host, 0, DLEN);
		t_sync_worker(e);
		struct xfer_completion c = {.user_data = 100 + (uint64_t)round};
		CHECK_OK(xfer_expect_imm(e, IMM_BASE + (uint32_t)round, mine, &c));
		t_send_u64(fd, 1); /* armed */
		struct xfer_cqe cqe = t_wait_cqe(e, 30000);
		CHECK(cqe.user_data == 100 + (uint64_t)round);
		CHECK_RC(cqe.res, 0);
		t_fill(want, SLEN, round == 0 ? 5 : 6);
		for (int k = 0; k < NENT; k++) {
			struct xfer_scatter_entry en = entry(k);
			if (en.member != (uint32_t)idx)
				continue;
			uint8_t *dst = to_gpu(k) ? gpu : host;
			if (memcmp(dst + en.dst_off, want + en.src_off, en.len) != 0) {
				fprintf(stderr, "member %d entry %d (%s, %llu bytes) wrong\n", idx, k,
					to_gpu(k) ? "GPU" : "host", (unsigned long long)en.len);
				return 1;
			}
			/* The byte after every slice is untouched (len 0: the first). */
			CHECK(dst[en.dst_off + en.len] == 0);
		}
		CHECK(t_recv_u64(fd) == 2);
	}
	/* Staged: the bytes reached our GPU through the mirror, copied here
	 * when the notices arrived. IPC: the root copied them in; no copy here. */
	struct fake_cuda_counts fc = fake_cuda_counts();
	CHECK(staged ? fc.htod > 0 : fc.htod == 0);
	t_send_u64(fd, 3);
	CHECK_OK(xfer_mr_dereg(gmr));
	CHECK_OK(xfer_mr_dereg(hmr));
	xfer_engine_destroy(e);
	fake_cuda_free(gpu);
	free(host);
	free(want);
	return 0;
}

static int scatter_root(int n, const int *fds, void *arg)
{
	(void)arg;
	fake_cuda_install();
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peers[NCHILD];
	xfer_rmr_t *grmr[NCHILD], *hrmr[NCHILD];
	for (int i = 0; i < n; i++)
		peers[i] = t_connect(e, fds[i]);
	for (int i = 0; i < n; i++) {
		grmr[i] = t_recv_rmr(e, peers[i], fds[i]);
		hrmr[i] = t_recv_rmr(e, peers[i], fds[i]);
	}
	uint8_t *gsrc = fake_cuda_alloc(SLEN, 0), *hsrc = malloc(SLEN);
	CHECK(gsrc && hsrc);
	t_fill(gsrc, SLEN, 5);
	t_fill(hsrc, SLEN, 6);
	xfer_mr_t *gmr, *hmr;
	CHECK_OK(xfer_mr_reg(e, gsrc, SLEN, &gmr));
	CHECK_OK(xfer_mr_reg(e, hsrc, SLEN, &hmr));
	xfer_group_t *g;
	CHECK_OK(xfer_group_create(e, peers, (uint32_t)n, &g));
	struct xfer_scatter_entry en[NENT];
	int32_t status[NENT];
	for (int k = 0; k < NENT; k++) {
		en[k] = entry(k);
		en[k].dst = to_gpu(k) ? grmr[en[k].member] : hrmr[en[k].member];
	}
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < n; i++)
			CHECK(t_recv_u64(fds[i]) == 1);
		for (int k = 0; k < NENT; k++)
			status[k] = 12345;
		struct xfer_scatter sc = {.src = round == 0 ? gmr : hmr, .entries = en, .n = NENT,
					  .imm = IMM_BASE + (uint32_t)round, .flags = XFER_F_IMM,
					  .status = status};
		struct xfer_completion c = {.user_data = 7 + (uint64_t)round};
		CHECK_OK(xfer_scatter(e, g, &sc, &c));
		struct xfer_cqe cqe = t_wait_cqe(e, 30000);
		CHECK(cqe.user_data == 7 + (uint64_t)round && cqe.kind == XFER_OP_SCATTER);
		CHECK_RC(cqe.res, 0);
		for (int k = 0; k < NENT; k++)
			CHECK_RC(status[k], 0);
		/* Exactly one completion per scatter. */
		t_sync_worker(e);
		struct xfer_cqe extra;
		CHECK(xfer_cq_poll(e, &extra, 1) == 0);
		for (int i = 0; i < n; i++)
			t_send_u64(fds[i], 2);
	}
	for (int i = 0; i < n; i++)
		CHECK(t_recv_u64(fds[i]) == 3);
	struct fake_cuda_counts fc = fake_cuda_counts();
	if (staged) {
		CHECK(fc.ipc_opens == 0);
		CHECK(fc.dtoh > 0); /* the GPU source was staged through its mirror */
	} else {
		CHECK(fc.ipc_opens == (uint64_t)n);
		CHECK(fc.dtod > 0 && fc.htod > 0); /* GPU and host sources, copied in */
	}
	CHECK_OK(xfer_group_destroy(g));
	for (int i = 0; i < n; i++) {
		xfer_rmr_free(grmr[i]);
		xfer_rmr_free(hrmr[i]);
	}
	CHECK_OK(xfer_mr_dereg(gmr));
	CHECK_OK(xfer_mr_dereg(hmr));
	xfer_engine_destroy(e);
	fake_cuda_free(gsrc);
	free(hsrc);
	printf("scatter (%s): %d entries x 2 rounds to %d members verified\n", staged ? "staged" : "ipc",
	       NENT, n);
	return 0;
}

/* ---------------------------------------------------------------- writes */

#define PAGES 64u
/* The paged write's page length: 4 KiB, or 16 KiB in the "-big" modes
 * (PAGES of them still fit the 1 MiB regions), whose launches go to the
 * bulk kernel by default where the 4 KiB ones go to the tile kernel, or
 * 2 MiB in write-huge (128 MiB regions: a launch above 64 MiB goes to the
 * tile kernel again). */
static uint32_t wpage = 4096u;
static size_t wlen = 1u << 20;

/* Which kernel the launches of this process went to by default. */
static bool default_kernels_ok(const struct fake_cuda_counts *fc)
{
	bool bulk = wpage >= (16u << 10) && (uint64_t)PAGES * wpage <= (64u << 20);
	return fc->by_kernel[bulk ? 2 : 1] == fc->launches;
}

/* A target: its engine, len bytes of GPU memory on dev registered, and a
 * host buffer for the bytes it should end up holding. */
struct wdst {
	xfer_engine_t *e;
	uint8_t *gpu, *want;
	xfer_mr_t *mr;
};

static struct wdst wdst_open(int fd, size_t len, int dev)
{
	struct wdst d;
	d.e = fake_engine(fd, NULL);
	d.gpu = fake_cuda_alloc(len, dev);
	d.want = malloc(len);
	CHECK(d.gpu && d.want);
	CHECK_OK(xfer_mr_reg(d.e, d.gpu, len, &d.mr));
	return d;
}

static void wdst_close(struct wdst *d)
{
	CHECK_OK(xfer_mr_dereg(d->mr));
	xfer_engine_destroy(d->e);
	fake_cuda_free(d->gpu);
	free(d->want);
}

static int write_target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct wdst d = wdst_open(fd, wlen, 2);
	xfer_engine_t *e = d.e;
	uint8_t *gpu = d.gpu, *want = d.want;
	xfer_mr_t *mr = d.mr;
	/* The copy kernels are loaded at registration, before anything lands:
	 * a lazy load at the first landing could wait for an application kernel
	 * spinning on that landing's signal word (gpu_copy.c). */
	t_sync_worker(e);
	CHECK(fake_cuda_counts().module_loads == (!no_kernel && xi_gpu_fatbin_len > 0 ? 1u : 0u));
	struct xfer_completion c = {0};
	CHECK_OK(xfer_expect_imm(e, 1, 1, &c));
	t_send_desc(fd, mr);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	t_fill(want, wlen, 9);
	CHECK(memcmp(gpu, want, wlen) == 0);
	memset(gpu, 0, wlen);
	t_sync_worker(e);
	CHECK_OK(xfer_expect_imm(e, 2, PAGES, &c));
	t_send_u64(fd, 1);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	for (uint32_t i = 0; i < PAGES; i++)
		CHECK(memcmp(gpu + (size_t)((i * 7) % PAGES) * wpage, want + (size_t)i * wpage, wpage) == 0);
	/* Staged notices land by copies the worker polls: it never waited for
	 * a stream here either. The paged write's 64 ranges land by one scatter
	 * kernel from the mirror, the single write's one range by a copy. */
	struct fake_cuda_counts fc = fake_cuda_counts();
	CHECK(fc.syncs == 0);
	bool kernels = !no_kernel && xi_gpu_fatbin_len > 0;
	CHECK(!staged || (fc.htod == (kernels ? 1u : 1u + PAGES) && fc.launches == (kernels ? 1u : 0u)));
	CHECK(default_kernels_ok(&fc)); /* the landing's scatter, staged */
	t_send_u64(fd, 2);
	wdst_close(&d);
	return 0;
}

/* A writer: its engine, wlen bytes of GPU memory filled from seed and
 * registered, and the target's region imported. */
struct wsrc {
	xfer_engine_t *e;
	uint8_t *src;
	xfer_mr_t *mr;
	xfer_rmr_t *dst;
};

static struct wsrc wsrc_open_len(int fd, uint64_t seed, size_t len)
{
	struct wsrc s;
	xfer_peer_t peer;
	s.e = fake_engine(fd, &peer);
	s.src = fake_cuda_alloc(len, 0);
	CHECK(s.src);
	t_fill(s.src, len, seed);
	CHECK_OK(xfer_mr_reg(s.e, s.src, len, &s.mr));
	s.dst = t_recv_rmr(s.e, peer, fd);
	return s;
}

static struct wsrc wsrc_open(int fd, uint64_t seed)
{
	return wsrc_open_len(fd, seed, wlen);
}

static void wsrc_close(struct wsrc *s)
{
	xfer_rmr_free(s->dst);
	CHECK_OK(xfer_mr_dereg(s->mr));
	xfer_engine_destroy(s->e);
	fake_cuda_free(s->src);
}

static int write_source(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	int fd = fds[0];
	struct wsrc ws = wsrc_open(fd, 9);
	xfer_engine_t *e = ws.e;
	xfer_mr_t *mr = ws.mr;
	xfer_rmr_t *dst = ws.dst;
	/* The copy ring's events were made with the stream, at registration:
	 * none on the way of a copy (gpu_copy.c, make_ring). */
	t_sync_worker(e);
	const uint64_t events_made = fake_cuda_counts().events_made;
	CHECK(events_made >= XI_GPU_RING);
	struct xfer_write w = {.src = mr, .dst = dst, .len = wlen, .imm = 1, .flags = XFER_F_IMM};
	CHECK_OK(xfer_write(e, &w, NULL));
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	uint32_t sp[PAGES], dp[PAGES];
	for (uint32_t i = 0; i < PAGES; i++) {
		sp[i] = i;
		dp[i] = (i * 7) % PAGES;
	}
	struct xfer_paged_write pw = {.src = mr, .dst = dst, .page_len = wpage, .src_pages = sp,
				      .src_stride = wpage, .dst_pages = dp, .dst_stride = wpage,
				      .npages = PAGES, .imm = 2, .flags = XFER_F_IMM};
	CHECK(t_recv_u64(fd) == 1);
	CHECK_OK(xfer_write_paged(e, &pw, NULL));
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	CHECK(t_recv_u64(fd) == 2);
	struct fake_cuda_counts fc = fake_cuda_counts();
	CHECK(fc.events_made == events_made);
	CHECK(staged ? fc.ipc_opens == 0 && fc.dtoh > 0 : fc.ipc_opens == 1 && fc.dtod + fc.launches > 0);
	/* The single write is one copy-engine copy (alone in its batch: below
	 * XFER_GPU_KERNEL_MAX, but a lone contiguous copy goes to the engine);
	 * the pages one kernel launch, or one copy each without kernels. */
	bool kernels = !no_kernel && xi_gpu_fatbin_len > 0;
	CHECK(fc.launches == (kernels ? 1u : 0u) && fc.jobs == fc.launches);
	CHECK(default_kernels_ok(&fc));
	CHECK(staged || fc.dtod == (kernels ? 1u : 1u + PAGES));
	/* Staged, the pages are gathered into the mirror by that one kernel,
	 * the single write by one copy to the mirror. */
	CHECK(!staged || fc.dtoh == (kernels ? 1u : 1u + PAGES));
	/* The source's staging copies are events the worker polls: it never
	 * waited for a stream. */
	CHECK(fc.syncs == 0);
	/* Each tracked copy is followed by its stream's write of a word, which
	 * the worker reads for its end (no event query found one done);
	 * XFER_GPU_DONE=event (write-event): no words, events. */
	CHECK(fc.write_values == (done_flag ? 2u : 0u) && (!done_flag || fc.events_done == 0));
	wsrc_close(&ws);
	printf("write (%s): single and %u pages of %u B verified, %llu kernel launch(es) (tile %llu, bulk %llu)\n",
	       staged ? (kernels ? "staged, kernel" : "staged") : kernels ? "ipc, kernel" : "ipc, copy engine", PAGES,
	       wpage, (unsigned long long)fc.launches, (unsigned long long)fc.by_kernel[1],
	       (unsigned long long)fc.by_kernel[2]);
	return 0;
}

/* ------------------------------------------------------- page-list ring */

/* Paged writes whose page lists (60,000 pages: 480,000 bytes) overflow the
 * kernel's 4 MiB page-list ring while their events are held: posting stalls
 * instead of overwriting lists in use, the ring wraps, and every write still
 * lands once, with all its immediates. */
#define RING_CALLS 12
#define RING_PAGES 60000u
#define RING_PAGE 16u
#define RING_LEN (RING_PAGES * RING_PAGE)
#define IMM_RING 0x6d0

static int ring_target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	xfer_engine_t *e = fake_engine(fd, NULL);
	uint8_t *gpu = fake_cuda_alloc(RING_LEN, 1);
	CHECK(gpu);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, gpu, RING_LEN, &mr));
	struct xfer_completion c = {0};
	CHECK_OK(xfer_expect_imm(e, IMM_RING, RING_CALLS * RING_PAGES, &c));
	t_send_desc(fd, mr);
	CHECK_RC(t_wait_cqe(e, 60000).res, 0);
	/* Page i of the source (bytes all i's low byte + call) went to page
	 * (i * 7) % n; the last call's bytes are what remains. */
	for (uint32_t i = 0; i < RING_PAGES; i++) {
		const uint8_t *pg = gpu + (size_t)((i * 7u) % RING_PAGES) * RING_PAGE;
		for (uint32_t b = 0; b < RING_PAGE; b++)
			CHECK(pg[b] == (uint8_t)(i + b));
	}
	t_send_u64(fd, 1);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	fake_cuda_free(gpu);
	return 0;
}

static int ring_source(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	int fd = fds[0];
	xfer_peer_t peer;
	xfer_engine_t *e = fake_engine(fd, &peer);
	uint8_t *src = fake_cuda_alloc(RING_LEN, 0);
	uint32_t *sp = malloc(RING_PAGES * sizeof(*sp)), *dp = malloc(RING_PAGES * sizeof(*dp));
	CHECK(src && sp && dp);
	for (uint32_t i = 0; i < RING_PAGES; i++) {
		sp[i] = i;
		dp[i] = (i * 7u) % RING_PAGES;
		for (uint32_t b = 0; b < RING_PAGE; b++)
			src[(size_t)i * RING_PAGE + b] = (uint8_t)(i + b);
	}
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, src, RING_LEN, &mr));
	xfer_rmr_t *dst = t_recv_rmr(e, peer, fd);
	struct xfer_paged_write pw = {.src = mr, .dst = dst, .page_len = RING_PAGE, .src_pages = sp,
				      .src_stride = RING_PAGE, .dst_pages = dp, .dst_stride = RING_PAGE,
				      .npages = RING_PAGES, .imm = IMM_RING, .flags = XFER_F_IMM};
	fake_cuda_hold_events(1);
	for (int k = 0; k < RING_CALLS; k++)
		CHECK_OK(xfer_write_paged(e, &pw, NULL));
	t_sync_worker(e);
	usleep(50000);
	struct fake_cuda_counts before = fake_cuda_counts();
	uint64_t held = before.jobs;
	fake_cuda_hold_events(0);
	for (int k = 0; k < RING_CALLS; k++)
		CHECK_RC(t_wait_cqe(e, 60000).res, 0);
	CHECK(t_recv_u64(fd) == 1);
	struct fake_cuda_counts fc = fake_cuda_counts();
	bool kernels = xi_gpu_fatbin_len > 0;
	/* 4 MiB hold 8 lists of 480,000 bytes: while held, at most 8 calls
	 * launched (the calls taken in one turn share launches); the 9th
	 * skips the ring's end. */
	CHECK(!kernels || (held >= 1 && held <= 8 && before.launches <= held));
	CHECK(fc.jobs == (kernels ? (uint64_t)RING_CALLS : 0u));
	CHECK(fc.launches <= fc.jobs && (!kernels || fc.launches >= 2));
	xfer_rmr_free(dst);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	fake_cuda_free(src);
	free(sp);
	free(dp);
	printf("write-ring: %d paged writes of %u pages in %llu launches, %llu launched while events were held, all landed\n",
	       RING_CALLS, RING_PAGES, (unsigned long long)fc.launches, (unsigned long long)held);
	return 0;
}

/* ---------------------------------------------------------- kernel batches */

/* 40 calls queued behind a worker held inside its first launch (the fake's
 * gate; the first call is paged: a lone contiguous copy would go to the copy
 * engine), then taken in one turn: 7 aligned paged writes and 16 aligned
 * single ones share one launch; 8 unaligned single writes go to the copy
 * engine (which first launches what is queued); 8 paged writes of odd pages
 * share a launch of their own (the kernel's byte path). Every byte and
 * immediate lands once. XFER_GPU_BATCH=0 (write-batch-off): one launch per
 * paged call, and every single write alone, so by the copy engine. */
#define B_CALLS 40
#define B_SLICE (80u << 10)
#define B_LEN (B_CALLS * B_SLICE)
#define B_NP 8u
#define IMM_BATCH 0x6e0

static bool batch_off, batch_nomerge;
static int batch_kernel = 1; /* launches expected of: 0 warp, 1 tile (default), 2 bulk (XFER_GPU_PAGES) */

struct bcall {
	int kind; /* 0 aligned single, 1 aligned paged, 2 unaligned single, 3 unaligned paged */
	uint64_t src, dst, len, src_stride, dst_stride;
	uint32_t sp[B_NP], dp[B_NP];
};

static struct bcall bcall_of(int i)
{
	struct bcall c = {.kind = i < 8 ? 1 : i < 24 ? 0 : i < 32 ? 2 : 3};
	uint64_t base = (uint64_t)i * B_SLICE;
	c.src = c.dst = base;
	for (uint32_t k = 0; k < B_NP; k++) {
		c.sp[k] = k;
		c.dp[k] = (k * 3 + (uint32_t)i) % B_NP;
	}
	if (c.kind == 0)
		c.len = 64u << 10;
	if (c.kind == 1)
		c.len = c.src_stride = c.dst_stride = 4096;
	if (c.kind == 2) {
		c.src += 3;
		c.dst += 5;
		c.len = 1000;
	}
	if (c.kind == 3) {
		c.src += 1;
		c.dst += 3;
		c.len = 1000;
		c.src_stride = 1003;
		c.dst_stride = 1001;
	}
	return c;
}

static uint32_t bcall_imms(const struct bcall *c)
{
	return c->kind % 2 ? B_NP : 1;
}

static void bcall_apply(const struct bcall *c, uint8_t *dst, const uint8_t *src)
{
	if (c->kind % 2 == 0) {
		memcpy(dst + c->dst, src + c->src, c->len);
		return;
	}
	for (uint32_t k = 0; k < B_NP; k++)
		memcpy(dst + c->dst + c->dp[k] * c->dst_stride, src + c->src + c->sp[k] * c->src_stride, c->len);
}

static int batch_target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	xfer_engine_t *e = fake_engine(fd, NULL);
	uint8_t *gpu = fake_cuda_alloc(B_LEN, 1), *src = malloc(B_LEN), *want = calloc(1, B_LEN);
	CHECK(gpu && src && want);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, gpu, B_LEN, &mr));
	uint32_t imms = 0;
	t_fill(src, B_LEN, 5);
	for (int i = 0; i < B_CALLS; i++) {
		struct bcall c = bcall_of(i);
		bcall_apply(&c, want, src);
		imms += bcall_imms(&c);
	}
	struct xfer_completion c = {0};
	CHECK_OK(xfer_expect_imm(e, IMM_BATCH, imms, &c));
	t_send_desc(fd, mr);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	CHECK(memcmp(gpu, want, B_LEN) == 0);
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 2);
	uint32_t extra = 99;
	CHECK_OK(xfer_imm_disarm(e, IMM_BATCH, &extra));
	CHECK(extra == 0); /* nothing counted twice */
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	fake_cuda_free(gpu);
	free(src);
	free(want);
	return 0;
}

static int batch_source(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	int fd = fds[0];
	xfer_peer_t peer;
	xfer_engine_t *e = fake_engine(fd, &peer);
	uint8_t *src = fake_cuda_alloc(B_LEN, 0);
	CHECK(src);
	t_fill(src, B_LEN, 5);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, src, B_LEN, &mr));
	xfer_rmr_t *dst = t_recv_rmr(e, peer, fd);
	struct bcall calls[B_CALLS];
	struct fake_cuda_counts c0 = fake_cuda_counts();
	struct xfer_stats s0;
	xfer_engine_stats(e, &s0);
	fake_cuda_gate(1);
	for (int i = 0; i < B_CALLS; i++) {
		struct bcall *c = &calls[i];
		*c = bcall_of(i);
		if (c->kind % 2 == 0) {
			struct xfer_write w = {.src = mr, .src_off = c->src, .dst = dst, .dst_off = c->dst, .len = c->len,
					       .imm = IMM_BATCH, .flags = XFER_F_IMM};
			CHECK_OK(xfer_write(e, &w, NULL));
		} else {
			struct xfer_paged_write pw = {.src = mr, .dst = dst, .page_len = c->len, .src_pages = c->sp,
						      .src_stride = c->src_stride, .src_base = c->src,
						      .dst_pages = c->dp, .dst_stride = c->dst_stride,
						      .dst_base = c->dst, .npages = B_NP, .imm = IMM_BATCH,
						      .flags = XFER_F_IMM};
			CHECK_OK(xfer_write_paged(e, &pw, NULL));
		}
		/* The worker holds the first call's launch while the rest queue. */
		for (int k = 0; i == 0 && !fake_cuda_gate_waiting() && k < 10000; k++)
			usleep(1000);
		CHECK(i > 0 || fake_cuda_gate_waiting());
	}
	fake_cuda_gate(0);
	for (int i = 0; i < B_CALLS; i++)
		CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	CHECK(t_recv_u64(fd) == 1);
	struct fake_cuda_counts fc = fake_cuda_counts();
	uint64_t launches = fc.launches - c0.launches, jobs = fc.jobs - c0.jobs, dtod = fc.dtod - c0.dtod;
	/* Through IPC the requests posted are the copies' notices: the copies
	 * of a launch finish together, so theirs go as one (the target still
	 * counts every immediate once) while each can go at once: always on
	 * shm, where a launch's copies then cost one notice and each of the 8
	 * copy-engine copies one; on tcp the first notices may wait for the
	 * connection, and those behind them go one by one, in order.
	 * XFER_NOTICE_MERGE=0 (write-batch-nomerge), or one launch per call:
	 * one notice per call. */
	struct xfer_stats s1;
	xfer_engine_stats(e, &s1);
	const uint64_t notices = s1.wrs_posted - s0.wrs_posted;
	const char *prov = getenv("XFER_TEST_PROVIDER");
	if (!staged)
		CHECK(batch_off || batch_nomerge ? notices == B_CALLS
		      : prov && !strcmp(prov, "shm") ? notices <= launches + 8 : notices <= B_CALLS);
	/* Batched: the first call, then the 23 aligned calls taken behind it,
	 * then the 8 odd paged ones. */
	uint64_t dtoh = fc.dtoh - c0.dtoh;
	if (staged)
		/* Each call stages once: 24 aligned calls (7 paged, 16 single, and
		 * the first) and 8 odd paged ones by kernel jobs, sharing a few
		 * launches; the 8 unaligned singles (and a job alone in its
		 * launch) by DtoH. Without the early staging every call's copy
		 * is alone: 16 launches of one job and 24 DtoH copies. */
		CHECK(jobs + dtoh == B_CALLS && dtoh >= 8 && dtoh <= 12 && launches >= 2 && launches <= 8 && dtod == 0);
	else
		CHECK(batch_off ? jobs == 16 && dtod == 24 && launches == jobs : jobs == 32 && dtod == 8 && launches == 3);
	/* The kernel each launch went to: the chosen one, but bulk copies only
	 * for aligned launches (the 8 odd paged calls share the warp kernel's). */
	uint64_t by[3];
	for (int k = 0; k < 3; k++)
		by[k] = fc.by_kernel[k] - c0.by_kernel[k];
	if (batch_kernel == 2 && !staged)
		CHECK(by[0] == (batch_off ? 8u : 1u) && by[1] == 0 && by[2] == launches - by[0]);
	else
		CHECK(by[batch_kernel] == launches);
	t_send_u64(fd, 2);
	xfer_rmr_free(dst);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	fake_cuda_free(src);
	printf("write-batch%s%s: %d calls verified, %llu notices, %llu kernel jobs in %llu launches (warp %llu, tile %llu, bulk "
	       "%llu), %llu copy-engine copies (%llu DtoH)\n",
	       batch_off ? " (XFER_GPU_BATCH=0)" : batch_nomerge ? " (XFER_NOTICE_MERGE=0)" : staged ? " (staged)" : "", batch_kernel == 0 ? " (warp)" : batch_kernel == 2 ? " (bulk)" : "",
	       B_CALLS, (unsigned long long)notices, (unsigned long long)jobs, (unsigned long long)launches, (unsigned long long)by[0],
	       (unsigned long long)by[1], (unsigned long long)by[2], (unsigned long long)(dtod + dtoh),
	       (unsigned long long)dtoh);
	return 0;
}

/* ------------------------------------------------------------ cut short */

#define IMM_CUT 0x6c7

static int cut_target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	xfer_engine_t *e = fake_engine(fd, NULL);
	uint8_t *gpu = fake_cuda_alloc(DLEN, 1), *host = calloc(1, DLEN);
	CHECK(gpu && host);
	xfer_mr_t *gmr, *hmr;
	CHECK_OK(xfer_mr_reg(e, gpu, DLEN, &gmr));
	CHECK_OK(xfer_mr_reg(e, host, DLEN, &hmr));
	t_send_desc(fd, gmr);
	t_send_desc(fd, hmr);
	/* The two host entries count; the two GPU ones must not. */
	struct xfer_completion c = {0};
	CHECK_OK(xfer_expect_imm(e, IMM_CUT, 2, &c));
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	CHECK(t_recv_u64(fd) == 1); /* the root's op has finished */
	usleep(200000);
	t_sync_worker(e);
	uint32_t extra = 99;
	CHECK_OK(xfer_imm_disarm(e, IMM_CUT, &extra));
	CHECK(extra == 0);
	t_send_u64(fd, 2);
	CHECK_OK(xfer_mr_dereg(gmr));
	CHECK_OK(xfer_mr_dereg(hmr));
	xfer_engine_destroy(e);
	fake_cuda_free(gpu);
	free(host);
	return 0;
}

static int cut_root(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	int fd = fds[0];
	xfer_peer_t peer;
	xfer_engine_t *e = fake_engine(fd, &peer);
	xfer_rmr_t *grmr = t_recv_rmr(e, peer, fd), *hrmr = t_recv_rmr(e, peer, fd);
	uint8_t *src = malloc(SLEN);
	CHECK(src);
	t_fill(src, SLEN, 8);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, src, SLEN, &mr));
	xfer_group_t *g;
	CHECK_OK(xfer_group_create(e, &peer, 1, &g));
	struct xfer_scatter_entry en[4];
	for (int k = 0; k < 4; k++)
		en[k] = (struct xfer_scatter_entry){.member = 0, .src_off = (uint64_t)k * 1000, .len = 1000,
						    .dst = k % 2 ? hrmr : grmr,
						    .dst_off = (uint64_t)k * 1000};
	int32_t status[4];
	struct xfer_scatter sc = {.src = mr, .entries = en, .n = 4, .imm = IMM_CUT, .flags = XFER_F_IMM,
				  .status = status};
	fake_cuda_hold_events(1);
	struct xfer_completion c = {.user_data = 5, .timeout_ms = 30, .tag = 77};
	CHECK_OK(xfer_scatter(e, g, &sc, &c));
	struct xfer_cqe cqe = t_wait_cqe(e, 30000);
	CHECK(cqe.user_data == 5);
	CHECK_RC(cqe.res, -ETIMEDOUT);
	/* The copies finish after the deadline: no notice may follow them. The
	 * cancel completes once the op has drained (nothing of it was cut). */
	fake_cuda_hold_events(0);
	c = (struct xfer_completion){.user_data = 6};
	CHECK_OK(xfer_cancel(e, 77, &c));
	cqe = t_wait_cqe(e, 30000);
	CHECK(cqe.user_data == 6 && cqe.kind == XFER_OP_CANCEL && cqe.res == 0);
	CHECK(fake_cuda_counts().ipc_opens == 1);
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 2);
	CHECK_OK(xfer_group_destroy(g));
	xfer_rmr_free(grmr);
	xfer_rmr_free(hrmr);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	free(src);
	printf("scatter-cut: expired scatter counted no immediate for its late GPU copies\n");
	return 0;
}

/* ------------------------------------------------- completion and waits */

#define N_ROW 2000
#define IMM_NOTICE 0x6f0

static int notice_target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct wdst d = wdst_open(fd, wlen, 1);
	xfer_engine_t *e = d.e;
	uint8_t *gpu = d.gpu, *want = d.want;
	xfer_mr_t *mr = d.mr;
	struct xfer_completion c = {0};
	CHECK_OK(xfer_expect_imm(e, IMM_NOTICE, 2 + N_ROW, &c));
	t_send_desc(fd, mr);
	t_send_u64(fd, (uint64_t)getpid());
	CHECK_RC(t_wait_cqe(e, 60000).res, 0);
	t_fill(want, wlen, 11);
	CHECK(memcmp(gpu, want, wlen) == 0);
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 2);
	t_sync_worker(e);
	uint32_t extra = 99;
	CHECK_OK(xfer_imm_disarm(e, IMM_NOTICE, &extra));
	CHECK(extra == 0); /* nothing counted twice */
	wdst_close(&d);
	return 0;
}

static uint64_t ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ThreadSanitizer's runtime can block inside an atomic access (its own
 * locks): a voluntary switch that is not the wait going to sleep. */
#if defined(__SANITIZE_THREAD__)
#define SWITCHES_MEAN_SLEEP 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SWITCHES_MEAN_SLEEP 0
#endif
#endif
#ifndef SWITCHES_MEAN_SLEEP
#define SWITCHES_MEAN_SLEEP 1
#endif

/* How long a wait stays awake for a GPU copy that does not move
 * (api/completions.c WAIT_GPU_STALL_NS) or for one announced to it
 * (core/notice.c AHEAD_NS): a wait that slept later than this after the
 * copy began tells nothing about its spinning. */
#define AWAKE_MS 100

static long voluntary_switches(void)
{
	struct rusage ru;
	CHECK(getrusage(RUSAGE_THREAD, &ru) == 0);
	return ru.ru_nvcsw;
}

/* Whether process pid is stopped (state T in /proc/pid/stat). */
static bool stopped(pid_t pid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'T';
}

static int notice_source(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	int fd = fds[0];
	struct wsrc ws = wsrc_open(fd, 11);
	xfer_engine_t *e = ws.e;
	pid_t target = (pid_t)t_recv_u64(fd);
	struct xfer_write w = {.src = ws.mr, .dst = ws.dst, .len = wlen, .imm = IMM_NOTICE, .flags = XFER_F_IMM};
	struct xfer_cqe q;

	/* A copy that does not finish (events held): the wait spins while it
	 * is young, returns at its timeout, and sleeps once the copy has not
	 * moved for 100 ms. */
	long v1 = 0;
	for (int attempt = 1;; attempt++) {
		fake_cuda_hold_events(1);
		uint64_t t_write = ms_now();
		CHECK_OK(xfer_write(e, &w, NULL));
		/* The worker runs a sync in the turn that takes it, before that
		 * turn issues the copies it took and publishes them: the second
		 * sync is taken in a later turn, after the copy is published as
		 * in flight. */
		t_sync_worker(e);
		t_sync_worker(e);
		long v0 = voluntary_switches();
		uint64_t t0 = ms_now();
		CHECK_RC(xfer_cq_wait(e, &q, 1, 30), -ETIMEDOUT);
		uint64_t t1 = ms_now();
		CHECK(t1 - t0 >= 30);
		v1 = voluntary_switches();
		if (!SWITCHES_MEAN_SLEEP || v1 == v0)
			break;
		/* The copy began after t_write; it can have gone 100 ms without
		 * moving (and the wait rightly slept) only when the wait ended
		 * that long after t_write: a loaded machine (CI runs tests in
		 * parallel on 2 vCPUs) descheduled us. That attempt cannot
		 * tell, so try again with a fresh copy; a sleep within 100 ms of
		 * the write is the wait's fault. */
		if (t1 - t_write < AWAKE_MS || attempt == 5) {
			fprintf(stderr,
				"the wait slept (%ld voluntary switches) while a GPU copy was in flight "
				"(attempt %d, wait ended %llu ms after the write)\n",
				v1 - v0, attempt, (unsigned long long)(t1 - t_write));
			return 1;
		}
		fprintf(stderr, "attempt %d inconclusive: the wait ended %llu ms after the write\n", attempt,
			(unsigned long long)(t1 - t_write));
		fake_cuda_hold_events(0);
		CHECK_RC(t_wait_cqe(e, 30000).res, 0);
		/* The target counts this test's immediates: a retry writes the
		 * same bytes without one. */
		w.flags = 0;
	}
	w.flags = XFER_F_IMM;
	CHECK_RC(xfer_cq_wait(e, &q, 1, 300), -ETIMEDOUT);
	CHECK(voluntary_switches() > v1); /* stopped moving: back to the futex */
	fake_cuda_hold_events(0);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);

	/* The target cannot take its notice while stopped: the write completes
	 * anyway, once its copy finished and the notice is posted. */
	CHECK(kill(target, SIGSTOP) == 0);
	for (int k = 0; k < 5000 && !stopped(target); k++)
		usleep(1000);
	CHECK(stopped(target));
	CHECK_OK(xfer_write(e, &w, NULL));
	int got = xfer_cq_wait(e, &q, 1, 10000);
	bool still = stopped(target);
	CHECK(kill(target, SIGCONT) == 0);
	if (got != 1 || !still) {
		fprintf(stderr, "write to a stopped target: %s%s\n", got == 1 ? "completed" : xfer_strerror(got),
			still ? "" : " (but the target ran meanwhile)");
		return 1;
	}
	CHECK_RC(q.res, 0);

	/* One after another: each write's context lives on as its notice after
	 * the write completed, and must come back (a leak would stall posting
	 * once the contexts ran out, well before 2,000). */
	w.len = 64u << 10; /* the same bytes again, a slice of them */
	for (int k = 0; k < N_ROW; k++) {
		CHECK_OK(xfer_write(e, &w, NULL));
		CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	}
	CHECK(t_recv_u64(fd) == 1); /* every immediate counted, bytes checked */
	t_send_u64(fd, 2);
	struct fake_cuda_counts fc = fake_cuda_counts();
	CHECK(fc.ipc_opens == 1 && fc.syncs == 0);
	wsrc_close(&ws);
	printf("write-notice: waits spun during the copy and slept once it stalled; a write to a stopped target "
	       "completed; %d more writes, every immediate counted once\n", N_ROW);
	return 0;
}

/* ------------------------------------------------------ many writes */

/* More writes than the engine has SEND bounce buffers (128), up to 16 in
 * flight, each 4 KiB slice of its own with its immediate: staged, every
 * notice's buffer must come back (a leak would hang the writer: one did in
 * a switch of branch stage7, 24c7a95), and every byte and immediate lands
 * once; through IPC the same with copies' notices. */
#define MANY 300
#define MANY_SLICE 4096u
#define IMM_MANY 0x6f0

static int many_target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct wdst d = wdst_open(fd, (size_t)MANY * MANY_SLICE, 1);
	struct xfer_completion c = {0};
	CHECK_OK(xfer_expect_imm(d.e, IMM_MANY, MANY, &c));
	t_send_desc(fd, d.mr);
	CHECK_RC(t_wait_cqe(d.e, 30000).res, 0);
	t_fill(d.want, (size_t)MANY * MANY_SLICE, 11);
	CHECK(memcmp(d.gpu, d.want, (size_t)MANY * MANY_SLICE) == 0);
	uint32_t extra = 99;
	CHECK_OK(xfer_imm_disarm(d.e, IMM_MANY, &extra));
	CHECK(extra == 0); /* nothing counted twice */
	t_send_u64(fd, 1);
	wdst_close(&d);
	return 0;
}

static int many_source(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	struct wsrc ws = wsrc_open_len(fds[0], 11, (size_t)MANY * MANY_SLICE);
	int inflight = 0;
	for (uint32_t i = 0; i < MANY; i++) {
		if (inflight == 16) {
			CHECK_RC(t_wait_cqe(ws.e, 30000).res, 0);
			inflight--;
		}
		struct xfer_write w = {.src = ws.mr, .src_off = (uint64_t)i * MANY_SLICE, .dst = ws.dst,
				       .dst_off = (uint64_t)i * MANY_SLICE, .len = MANY_SLICE, .imm = IMM_MANY,
				       .flags = XFER_F_IMM};
		CHECK_OK(xfer_write(ws.e, &w, NULL));
		inflight++;
	}
	for (; inflight; inflight--)
		CHECK_RC(t_wait_cqe(ws.e, 30000).res, 0);
	CHECK(t_recv_u64(fds[0]) == 1);
	struct fake_cuda_counts fc = fake_cuda_counts();
	CHECK(staged ? fc.dtoh == MANY && fc.ipc_opens == 0 : fc.ipc_opens == 1);
	CHECK(fc.syncs == 0); /* no landing or staging copy fell back to a synchronous one */
	wsrc_close(&ws);
	printf("write-many: %u %s writes of %u B verified\n", MANY, staged ? "staged" : "IPC", MANY_SLICE);
	return 0;
}

/* ---------------------------------------------------- early staging */

/* Staged writes queued behind one whose staging copy cannot finish (events
 * held): by default the 4 of 64 KiB behind it start their staging at once
 * (they stage at most XI_GPU_STAGE_AHEAD_MAX bytes), the one of 1 MiB
 * waits for its turn; XFER_GPU_STAGE_AHEAD=1 (-all) starts it too, =0
 * (-none) none. -next: the 1 MiB write is the one right behind the head,
 * which the default (XFER_GPU_STAGE_AHEAD=next) starts as well, =small
 * not (-next-small). Each op stages once, and every byte and immediate
 * lands. The copies are counted as copy-engine DtoH copies: these modes
 * set XFER_GPU_STAGE=engine (stagings by kernel jobs: write-batch-staged*). */
#define EARLY_SMALL (64u << 10)
#define EARLY_BIG (1u << 20)
#define EARLY_LEN (2u << 20)
#define IMM_EARLY 0x6e8
static uint64_t early_want; /* staging copies started while the head is held */
static bool early_big_next; /* the 1 MiB write right behind the head, not last */

static int early_target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct wdst d = wdst_open(fd, EARLY_LEN, 1);
	struct xfer_completion c = {0};
	CHECK_OK(xfer_expect_imm(d.e, IMM_EARLY, 6, &c));
	t_send_desc(fd, d.mr);
	CHECK_RC(t_wait_cqe(d.e, 30000).res, 0);
	t_fill(d.want, EARLY_LEN, 13);
	CHECK(memcmp(d.gpu, d.want, 5 * EARLY_SMALL) == 0);
	CHECK(memcmp(d.gpu + EARLY_BIG, d.want + EARLY_BIG, EARLY_BIG) == 0);
	t_send_u64(fd, 1);
	wdst_close(&d);
	return 0;
}

static int early_source(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	struct wsrc ws = wsrc_open_len(fds[0], 13, EARLY_LEN);
	/* One write first, so that connections and mirrors are up. */
	struct xfer_write w0 = {.src = ws.mr, .dst = ws.dst, .len = EARLY_SMALL, .imm = IMM_EARLY, .flags = XFER_F_IMM};
	CHECK_OK(xfer_write(ws.e, &w0, NULL));
	CHECK_RC(t_wait_cqe(ws.e, 30000).res, 0);
	uint64_t dtoh0 = fake_cuda_counts().dtoh;
	fake_cuda_hold_events(1);
	for (uint32_t i = 0, small = 0; i < 5; i++) {
		bool big = i == (early_big_next ? 1u : 4u);
		uint64_t off = big ? EARLY_BIG : (uint64_t)(++small) * EARLY_SMALL;
		struct xfer_write w = {.src = ws.mr, .src_off = off, .dst = ws.dst, .dst_off = off,
				       .len = big ? EARLY_BIG : EARLY_SMALL, .imm = IMM_EARLY, .flags = XFER_F_IMM};
		CHECK_OK(xfer_write(ws.e, &w, NULL));
	}
	/* The head's copy, then those started early; then nothing more while
	 * the head is held. */
	uint64_t t0 = ms_now();
	while (fake_cuda_counts().dtoh - dtoh0 < early_want && ms_now() - t0 < 10000)
		usleep(1000);
	usleep(50000);
	CHECK(fake_cuda_counts().dtoh - dtoh0 == early_want);
	fake_cuda_hold_events(0);
	for (int i = 0; i < 5; i++)
		CHECK_RC(t_wait_cqe(ws.e, 30000).res, 0);
	CHECK(t_recv_u64(fds[0]) == 1);
	CHECK(fake_cuda_counts().dtoh - dtoh0 == 5); /* each op staged once */
	wsrc_close(&ws);
	printf("write-early: %llu staging copies started behind a held head, every op staged once\n",
	       (unsigned long long)early_want);
	return 0;
}

/* ------------------------------------------------------ announced copy */

#define ALEN (32u << 20)
#define IMM_AHEAD 0x6f8

static int ahead_target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct wdst d = wdst_open(fd, ALEN, 1);
	xfer_engine_t *e = d.e;
	uint8_t *gpu = d.gpu, *want = d.want;
	xfer_mr_t *mr = d.mr;
	struct xfer_completion c = {0};
	CHECK_OK(xfer_expect_imm(e, IMM_AHEAD + 1, 1, &c));
	t_send_desc(fd, mr);
	/* A short write first (not announced): the connection is up (on tcp
	 * the first message to a peer waits for its setup). */
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	CHECK_OK(xfer_expect_imm(e, IMM_AHEAD, 1, &c));
	/* The announcement is sent after this: it keeps waits awake until
	 * 100 ms after it arrived, so no earlier than 100 ms after t_go. */
	uint64_t t_go = ms_now();
	t_send_u64(fd, 0);
	CHECK(t_recv_u64(fd) == 1); /* the copy is issued and held */
	usleep(20000);              /* its announcement has long arrived */
	struct xfer_cqe q;
	long v0 = voluntary_switches();
	CHECK_RC(xfer_cq_wait(e, &q, 1, 30), -ETIMEDOUT);
	uint64_t t_end = ms_now();
	long v1 = voluntary_switches();
	if (SWITCHES_MEAN_SLEEP && v1 != v0) {
		/* A sleep that may have come after the announcement went stale
		 * (a loaded machine descheduled this test) proves nothing. */
		if (t_end - t_go < AWAKE_MS) {
			fprintf(stderr, "the target's wait slept (%ld switches) during a copy announced to it "
					"(%llu ms after it was asked for)\n",
				v1 - v0, (unsigned long long)(t_end - t_go));
			return 1;
		}
		fprintf(stderr, "inconclusive: the wait ended %llu ms after the copy was asked for\n",
			(unsigned long long)(t_end - t_go));
		v1 = voluntary_switches();
	}
	/* 100 ms after the announcement it no longer keeps the wait awake. */
	CHECK_RC(xfer_cq_wait(e, &q, 1, 300), -ETIMEDOUT);
	CHECK(voluntary_switches() > v1);
	t_send_u64(fd, 2);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	t_fill(want, ALEN, 13);
	CHECK(memcmp(gpu, want, ALEN) == 0);
	t_send_u64(fd, 3);
	wdst_close(&d);
	return 0;
}

static int ahead_source(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	int fd = fds[0];
	struct wsrc ws = wsrc_open_len(fd, 13, ALEN);
	struct xfer_write w = {.src = ws.mr, .dst = ws.dst, .len = 4096, .imm = IMM_AHEAD + 1, .flags = XFER_F_IMM};
	CHECK_OK(xfer_write(ws.e, &w, NULL));
	CHECK_RC(t_wait_cqe(ws.e, 30000).res, 0);
	CHECK(t_recv_u64(fd) == 0);
	w.len = ALEN;
	w.imm = IMM_AHEAD;
	fake_cuda_hold_events(1);
	CHECK_OK(xfer_write(ws.e, &w, NULL));
	t_sync_worker(ws.e);
	t_sync_worker(ws.e); /* a later turn: the copy issued, its announcement posted */
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 2);
	fake_cuda_hold_events(0);
	CHECK_RC(t_wait_cqe(ws.e, 30000).res, 0);
	CHECK(t_recv_u64(fd) == 3);
	wsrc_close(&ws);
	printf("write-ahead: the target's wait spun during a copy announced to it, and slept after the bound\n");
	return 0;
}

/* ------------------------------------------------ landings, copy engine */

#define L_COPIES 8   /* one-piece landings: 3, a device copy, then 5 */
#define L_LEN 5000   /* odd: no kernel would take it */
#define L_PIECES 600 /* one copy of more pieces than a batch holds (XI_GPU_BATCH) */
#define L_BIG (300u << 10) /* above the most a batch takes: sends it, then goes alone */

static int land_run(bool batched)
{
	fake_cuda_install();
	struct xi_gpu *g = xi_gpu_create();
	const size_t dlen = (size_t)(L_COPIES + 1) * L_LEN + (size_t)L_PIECES * 64 + L_BIG;
	uint8_t *dev = fake_cuda_alloc(dlen, 0), *devsrc = fake_cuda_alloc(L_LEN, 0), *mirror = malloc(dlen);
	CHECK(g && dev && devsrc && mirror);
	t_fill(mirror, dlen, 7);
	t_fill(devsrc, L_LEN, 8);
	struct fake_cuda_counts c0 = fake_cuda_counts();
	int ctx[L_COPIES + 3];
	/* Copy k (k != 3): L_LEN bytes of the mirror at k * L_LEN; copy 3 a
	 * device-to-device copy into that slice instead. */
	for (int k = 0; k < L_COPIES + 1; k++) {
		uint64_t off = (uint64_t)k * L_LEN;
		CHECK_OK(xi_gpu_copy_begin(g, 0));
		if (k == 3)
			CHECK_OK(xi_gpu_copy_add(g, (uint64_t)(uintptr_t)dev + off, (uint64_t)(uintptr_t)devsrc, NULL, L_LEN));
		else
			CHECK_OK(xi_gpu_copy_add_land(g, (uint64_t)(uintptr_t)dev + off, mirror + off, L_LEN));
		CHECK_OK(xi_gpu_copy_end(g, &ctx[k]));
		struct fake_cuda_counts c = fake_cuda_counts();
		/* Batched, nothing reaches the driver before the device copy, which
		 * sends the three landings ahead of it. */
		if (batched)
			CHECK(c.htod - c0.htod == (k < 3 ? 0u : 3u) && c.batches - c0.batches == (k < 3 ? 0u : 1u));
		else
			CHECK(c.htod - c0.htod == (uint64_t)(k < 3 ? k + 1 : k) && c.batches == c0.batches);
	}
	/* One copy of L_PIECES 64-byte pieces. */
	uint64_t base = (uint64_t)(L_COPIES + 1) * L_LEN;
	CHECK_OK(xi_gpu_copy_begin(g, 0));
	for (int i = 0; i < L_PIECES; i++)
		CHECK_OK(xi_gpu_copy_add_land(g, (uint64_t)(uintptr_t)dev + base + 64u * i, mirror + base + 64u * i, 64));
	CHECK_OK(xi_gpu_copy_end(g, &ctx[L_COPIES + 1]));
	/* Then one big landing. */
	uint64_t big = base + 64u * L_PIECES;
	CHECK_OK(xi_gpu_copy_begin(g, 0));
	CHECK_OK(xi_gpu_copy_add_land(g, (uint64_t)(uintptr_t)dev + big, mirror + big, L_BIG));
	CHECK_OK(xi_gpu_copy_end(g, &ctx[L_COPIES + 2]));
	struct fake_cuda_counts c1 = fake_cuda_counts();
	CHECK(c1.htod - c0.htod == L_COPIES + L_PIECES + 1 && c1.dtod - c0.dtod == 1);
	/* The 5 landings after the device copy and the first XI_GPU_BATCH
	 * pieces go as one batch, the other pieces as a third, sent by the
	 * big landing before its own copy: nothing is left for the flush. */
	CHECK(batched ? c1.batches - c0.batches == 3 : c1.batches == c0.batches);
	xi_gpu_flush(g);
	CHECK(fake_cuda_counts().htod == c1.htod && fake_cuda_counts().batches == c1.batches);
	CHECK(c1.syncs == c0.syncs);
	int seen = 0;
	for (int spins = 0; seen < L_COPIES + 3 && spins < 100000; spins++) {
		struct xi_gpu_event ev[4];
		int n = xi_gpu_poll(g, ev, 4);
		for (int i = 0; i < n; i++, seen++) {
			CHECK(ev[i].ctx == &ctx[seen] && ev[i].status == 0); /* once each, in order */
			if (seen <= L_COPIES) {
				uint64_t off = (uint64_t)seen * L_LEN;
				CHECK(memcmp(dev + off, seen == 3 ? devsrc : mirror + off, L_LEN) == 0);
			}
		}
	}
	CHECK(seen == L_COPIES + 3 && xi_gpu_pending(g) == 0);
	CHECK(memcmp(dev + base, mirror + base, 64u * L_PIECES + L_BIG) == 0);
	struct xi_gpu_event extra[1];
	CHECK(xi_gpu_poll(g, extra, 1) == 0);
	xi_gpu_destroy(g);
	fake_cuda_free(dev);
	fake_cuda_free(devsrc);
	free(mirror);
	printf("land-%s: %d copies reported once, in order, bytes in place; %llu copies in %llu batched calls\n",
	       batched ? "batch" : "each", L_COPIES + 3, (unsigned long long)(c1.htod - c0.htod + c1.dtod - c0.dtod),
	       (unsigned long long)(c1.batches - c0.batches));
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "scatter-ipc";
	staged = strstr(mode, "-staged") != NULL;
	if (staged)
		setenv("XFER_GPU_IPC", "0", 1);
	no_kernel = strstr(mode, "-engine") != NULL;
	if (strstr(mode, "-big"))
		wpage = 16u << 10;
	if (!strcmp(mode, "write-huge")) {
		wpage = 2u << 20;
		wlen = (size_t)PAGES * wpage;
	}
	if (!strcmp(mode, "write-device"))
		setenv("XFER_GPU_INDEX", "device", 1);
	done_flag = strcmp(mode, "write-event") != 0;
	if (!done_flag)
		setenv("XFER_GPU_DONE", "event", 1);
	if (no_kernel)
		setenv("XFER_GPU_KERNEL", "0", 1);
	if (!strncmp(mode, "land-", 5)) {
		if (!strcmp(mode, "land-each"))
			setenv("XFER_GPU_LAND", "each", 1);
		return land_run(strcmp(mode, "land-each") != 0);
	}
		if (!strcmp(mode, "scatter-cut"))
		return t_run_procs(1, cut_target, cut_root, NULL);
	if (!strncmp(mode, "scatter", 7))
		return t_run_procs(NCHILD, scatter_child, scatter_root, NULL);
	if (!strcmp(mode, "write-ahead"))
		return t_run_procs(1, ahead_target, ahead_source, NULL);
	if (!strcmp(mode, "write-notice"))
		return t_run_procs(1, notice_target, notice_source, NULL);
	if (!strncmp(mode, "write-early", 11)) {
		/* The head's own, and the 64 KiB ones behind it (default), or
		 * also the 1 MiB one (-all), or none (-none). */
		early_big_next = strstr(mode, "-next") != NULL;
		early_want = strstr(mode, "-all") || !strcmp(mode, "write-early-staged-next") ? 5
			     : strstr(mode, "-none")					 ? 1
											 : 4;
		setenv("XFER_GPU_STAGE", "engine", 1);
		if (strstr(mode, "-all"))
			setenv("XFER_GPU_STAGE_AHEAD", "1", 1);
		if (strstr(mode, "-small"))
			setenv("XFER_GPU_STAGE_AHEAD", "small", 1);
		if (strstr(mode, "-none"))
			setenv("XFER_GPU_STAGE_AHEAD", "0", 1);
		return t_run_procs(1, early_target, early_source, NULL);
	}
	if (!strncmp(mode, "write-many", 10)) {
		/* Counted as copy-engine DtoH copies (XFER_GPU_STAGE=engine);
		 * -small: without the next op's staging started while the one
		 * before it posts (the default's next). */
		setenv("XFER_GPU_STAGE", "engine", 1);
		if (strstr(mode, "-small"))
			setenv("XFER_GPU_STAGE_AHEAD", "small", 1);
		return t_run_procs(1, many_target, many_source, NULL);
	}
	if (!strcmp(mode, "write-ring"))
		return t_run_procs(1, ring_target, ring_source, NULL);
	if (!strncmp(mode, "write-batch", 11)) {
		if (!xi_gpu_fatbin_len) {
			printf("SKIP: built without the copy kernels\n");
			return 77;
		}
		batch_off = !strcmp(mode, "write-batch-off");
		if (batch_off)
			setenv("XFER_GPU_BATCH", "0", 1);
		batch_nomerge = !strcmp(mode, "write-batch-nomerge");
		if (batch_nomerge)
			setenv("XFER_NOTICE_MERGE", "0", 1);
		if (staged) {
			/* -dtoh (the default, set here all the same): stagings by
			 * kernel jobs, landings by the copy engine; the source's counts
			 * are the same. */
			setenv("XFER_GPU_STAGE", strstr(mode, "-dtoh") ? "kernel-dtoh" : "kernel", 1);
			setenv("XFER_GPU_STAGE_AHEAD", "1", 1);
		}
		batch_kernel = !strcmp(mode, "write-batch-warp") ? 0 : !strcmp(mode, "write-batch-bulk") ? 2 : 1;
		if (batch_kernel != 1)
			setenv("XFER_GPU_PAGES", batch_kernel == 0 ? "warp" : "bulk", 1);
		return t_run_procs(1, batch_target, batch_source, NULL);
	}
	if (!strncmp(mode, "write", 5))
		return t_run_procs(1, write_target, write_source, NULL);
	fprintf(stderr, "unknown mode %s\n", mode);
	return 2;
}
