// xfer-gpu-bench, staged rows (XFER_BENCH_ONLY=staged): GPU memory moved
// over a NIC provider through pinned host mirrors (XFER_GPU_IPC=0: the
// source's bytes copied to its mirror first, the target's copied from its
// mirror to the GPU before the immediates count) against the same transfer
// between host regions, same provider (XFER_TEST_PROVIDER, default tcp on
// lo), same two processes, same run. Single writes 64 KiB / 1 MiB / 16 MiB
// and paged writes 1,024 x 4 / 16 / 64 KiB (random permutations), up to 16
// writes in flight; every row's bytes verified at the target.
// XFER_BENCH_STAGED_MS (default 100): each variant of a row (host, then GPU)
// keeps writing until it has run at least this long and made at least its
// minimum of calls (about 256 MiB, 8..256 calls): with only 256 calls of
// 64 KiB a row lasted 1-5 ms, and the host side of one row moved 3.9-14.8
// GB/s between rounds (stage8), so a ratio was one round's noise wide.
// 0: the fixed minimum alone, as before.
// XFER_BENCH_STAGED_SLOTS=N (default 1): call k of a row goes to slot k % N
// of the regions (offset slot x the call's bytes, both sides; as many slots
// as the 64 MiB regions hold), every slot filled and checked. With 1 every
// call moves the same bytes: a host row's copies stay in the CPU's caches,
// and a GPU row's DMA reads and writes the very lines the CPU's transport
// copy of the next call is touching; with 16 the 16 writes in flight touch
// 16 different places, as writes of a KV cache or of weights do.
// XFER_BENCH_CEILING=1: the ceiling rows (gpu_bench_ceiling.cu: the two
// copies of a staged write by plain CUDA calls, no xfer) after these rows,
// in the same two processes once their engines are gone, each beside its
// staged row's host GB/s of this run.
#include <algorithm>
#include <time.h>
#include <vector>

#include "gpu_common.h"
#include "gpu_pattern.h"

namespace {

const size_t single_sizes[] = {64u << 10, 1u << 20, 16u << 20};
const uint32_t page_sizes[] = {4u << 10, 16u << 10, 64u << 10};
const uint32_t npages = 1024;
constexpr int NSINGLE = 3, NPAGE = 3, NROW = NSINGLE + NPAGE;
constexpr size_t REGION = 64u << 20;

double now_s()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

bool row_paged(int r) { return r >= NSINGLE; }
size_t row_bytes(int r) { return row_paged(r) ? (size_t)page_sizes[r - NSINGLE] * npages : single_sizes[r]; }
// About 256 MiB a row, 8..256 calls, at most 16 in flight.
int row_calls(int r) { return (int)std::min<size_t>(256, std::max<size_t>(8, (256u << 20) / row_bytes(r))); }

// Slots of row r (see XFER_BENCH_STAGED_SLOTS): both processes read the
// same environment.
uint32_t row_slots(int r)
{
	const char *v = getenv("XFER_BENCH_STAGED_SLOTS");
	unsigned long n = v && *v ? strtoul(v, NULL, 10) : 1;
	unsigned long fit = REGION / row_bytes(r);
	n = std::min(n, fit);
	return n ? (uint32_t)n : 1;
}

double row_min_s()
{
	const char *v = getenv("XFER_BENCH_STAGED_MS");
	return (v && *v ? atof(v) : 100.0) / 1e3;
}

// Both ends: an engine joined to the peer over fd, and a host and a GPU
// region of REGION bytes registered in it (r[0] host, r[1] GPU).
struct ends {
	xfer_engine_t *e;
	xfer_peer_t peer;
	void *buf[2];
	xfer_mr_t *mr[2];
};

bool ends_open(int fd, struct ends *x)
{
	CK(cudaSetDevice(0));
	x->e = gpu_engine(fd, &x->peer);
	x->buf[0] = aligned_alloc(4096, REGION);
	CK(cudaMalloc(&x->buf[1], REGION));
	if (!x->buf[0])
		return false;
	for (int g = 0; g < 2; g++)
		XK(xfer_mr_reg(x->e, x->buf[g], REGION, &x->mr[g]));
	return true;
}

void ends_close(struct ends *x)
{
	for (int g = 0; g < 2; g++)
		xfer_mr_dereg(x->mr[g]);
	xfer_engine_destroy(x->e);
}

struct req {
	uint64_t cmd, gpu, row, seed, imm, imms;
};
enum { ZERO = 1, CHECK, END };

// The target: a host and a GPU region, both described to the source.
int target(int fd)
{
	struct ends x;
	if (!ends_open(fd, &x))
		return 1;
	xfer_engine_t *e = x.e;
	void *hbuf = x.buf[0], *gbuf = x.buf[1];
	uint8_t desc[XFER_DESC_MAX];
	for (int g = 0; g < 2; g++)
		put_blob(fd, desc, (size_t)xfer_mr_desc(x.mr[g], desc, sizeof(desc), NULL));
	unsigned long long *bad;
	uint32_t *lists;
	CK(cudaMalloc(&bad, sizeof(*bad)));
	CK(cudaMalloc(&lists, 2 * npages * sizeof(uint32_t)));
	for (;;) {
		struct req q;
		get_blob(fd, &q, sizeof(q));
		if (q.cmd == END)
			break;
		if (q.cmd == ZERO) {
			if (q.gpu)
				CK(cudaMemset(gbuf, 0, REGION));
			else
				memset(hbuf, 0, REGION);
			CK(cudaDeviceSynchronize());
			send_u64(fd, 0);
			continue;
		}
		struct xfer_completion xc;
		memset(&xc, 0, sizeof(xc));
		xc.timeout_ms = 30000;
		XK(xfer_expect_imm(e, (uint32_t)q.imm, (uint32_t)q.imms, &xc));
		uint64_t res = gpu_wait(e).res ? 1ull << 40 : 0;
		int r = (int)q.row;
		std::vector<uint32_t> sp, dp;
		uint32_t n = 1;
		uint64_t pw = row_bytes(r) / 8;
		if (row_paged(r)) {
			perm_xs(sp, npages, q.seed);
			perm_xs(dp, npages, q.seed + 1000);
			n = npages;
			pw = page_sizes[r - NSINGLE] / 8;
		}
		const uint32_t slots = row_slots(r);
		const size_t step = row_bytes(r);
		if (!q.gpu) {
			for (uint32_t k = 0; k < slots; k++)
				res += host_check((const uint64_t *)((const uint8_t *)hbuf + k * step), n > 1 ? &sp : NULL,
						  n > 1 ? &dp : NULL, n, pw, q.seed);
		} else {
			CK(cudaMemset(bad, 0, sizeof(*bad)));
			if (n > 1) {
				CK(cudaMemcpy(lists, sp.data(), n * 4, cudaMemcpyHostToDevice));
				CK(cudaMemcpy(lists + n, dp.data(), n * 4, cudaMemcpyHostToDevice));
			}
			for (uint32_t k = 0; k < slots; k++)
				check_pat<<<264, 512>>>((const uint64_t *)((const uint8_t *)gbuf + k * step),
						     n > 1 ? lists : NULL, n > 1 ? lists + n : NULL, n, pw, q.seed, bad);
			CK(cudaGetLastError());
			unsigned long long nbad = 0;
			CK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
			res += nbad;
		}
		send_u64(fd, res);
	}
	ends_close(&x);
	if (ceiling_wanted())
		ceiling_side(fd, 0, NULL);
	return 0;
}

uint64_t ask(int fd, struct req q)
{
	put_blob(fd, &q, sizeof(q));
	return recv_u64(fd);
}

int source(int fd)
{
	struct ends x;
	if (!ends_open(fd, &x))
		return 1;
	xfer_engine_t *e = x.e;
	xfer_peer_t peer = x.peer;
	void *hbuf = x.buf[0], *gbuf = x.buf[1];
	xfer_mr_t **mr = x.mr;
	xfer_rmr_t *dst[2];
	uint8_t desc[XFER_DESC_MAX];
	for (int g = 0; g < 2; g++) {
		size_t dl = get_blob(fd, desc, sizeof(desc));
		XK(xfer_rmr_import(e, peer, desc, dl, &dst[g]));
	}
	const char *prov = getenv("XFER_TEST_PROVIDER");
	printf("staged GPU memory (pinned host mirrors, XFER_GPU_IPC=0) vs host memory, provider %s, two processes,\n"
	       "same run; up to 16 writes in flight\n",
	       prov);
	const double min_s = row_min_s();
	printf("each variant of a row runs >= %.0f ms (XFER_BENCH_STAGED_MS); calls: GPU / host\n", min_s * 1e3);
	const char *sl = getenv("XFER_BENCH_STAGED_SLOTS");
	printf("call k to slot k %% %s of the regions (XFER_BENCH_STAGED_SLOTS; fewer where 64 MiB holds fewer)\n",
	       sl && *sl ? sl : "1");
	printf("%-26s %13s %10s %10s %7s  %s\n", "op", "calls", "GPU GB/s", "host GB/s", "ratio", "bytes");
	int fails = 0;
	double host_gbs[NROW] = {0}; // for the ceiling rows
	uint32_t imm = 3000;
	const char *only = getenv("XFER_BENCH_ROW"); // staged rows 0..5 in the order printed
	for (int r = 0; r < NROW; r++, imm += 2) {
		if (only && *only && atoi(only) != r)
			continue;
		double gbs[2];
		int ncalls[2];
		bool bad_any = false;
		std::vector<uint32_t> sp, dp;
		uint64_t seed = 900 + r;
		if (row_paged(r)) {
			perm_xs(sp, npages, seed);
			perm_xs(dp, npages, seed + 1000);
		}
		for (int g = 0; g < 2; g++) {
			ask(fd, (struct req){ZERO, (uint64_t)g, 0, 0, 0, 0});
			size_t bytes = row_bytes(r);
			const uint32_t slots = row_slots(r);
			for (uint32_t k = 0; k < slots; k++) {
				if (g) {
					fill_pat<<<264, 512>>>((uint64_t *)((uint8_t *)gbuf + k * bytes), bytes / 8, seed);
					CK(cudaDeviceSynchronize());
				} else {
					uint64_t *h = (uint64_t *)((uint8_t *)hbuf + k * bytes);
					for (uint64_t i = 0; i < bytes / 8; i++)
						h[i] = pat(i, seed);
				}
			}
			struct xfer_write w;
			struct xfer_paged_write pw;
			memset(&w, 0, sizeof(w));
			memset(&pw, 0, sizeof(pw));
			w.src = mr[g];
			w.dst = dst[g];
			w.len = bytes;
			w.imm = imm + g;
			w.flags = XFER_F_IMM;
			if (row_paged(r)) {
				uint32_t pl = page_sizes[r - NSINGLE];
				pw.src = mr[g];
				pw.dst = dst[g];
				pw.page_len = pl;
				pw.src_pages = sp.data();
				pw.src_stride = pl;
				pw.dst_pages = dp.data();
				pw.dst_stride = pl;
				pw.npages = npages;
				pw.imm = imm + g;
				pw.flags = XFER_F_IMM;
			}
			// At least row_calls(r) calls and min_s seconds: the count is
			// known only at the end, so the target is told it with CHECK.
			int calls = 0, inflight = 0;
			const int min_calls = row_calls(r), max_calls = (1 << 24) / (row_paged(r) ? (int)npages : 1);
			uint64_t seq = 0;
			auto post = [&]() {
				uint64_t off = (seq++ % slots) * bytes;
				w.src_off = w.dst_off = off;
				pw.src_base = pw.dst_base = off;
				XK(row_paged(r) ? xfer_write_paged(e, &pw, NULL) : xfer_write(e, &w, NULL));
			};
			post(); // warm-up: mirrors, connections
			XK(gpu_wait(e).res);
			double t0 = now_s();
			// Bounded so that a row's immediates stay well inside u32.
			while (calls < min_calls || (now_s() - t0 < min_s && calls < max_calls)) {
				if (inflight == 16) {
					XK(gpu_wait(e).res);
					inflight--;
				}
				post();
				inflight++;
				calls++;
			}
			for (; inflight; inflight--)
				XK(gpu_wait(e).res);
			gbs[g] = (double)bytes * calls / (now_s() - t0) / 1e9;
			ncalls[g] = calls;
			uint64_t per = row_paged(r) ? npages : 1;
			uint64_t bad = ask(fd, (struct req){CHECK, (uint64_t)g, (uint64_t)r, seed, imm + g, per * (calls + 1)});
			if (bad) {
				bad_any = true;
				printf("  %s row %d: %llu bad words%s\n", g ? "GPU" : "host", r,
				       (unsigned long long)(bad & ((1ull << 40) - 1)), bad >> 40 ? ", immediates missing" : "");
			}
		}
		fails += bad_any;
		host_gbs[r] = gbs[0];
		char op[64];
		if (row_paged(r))
			snprintf(op, sizeof(op), "paged %5u x %2u KiB", npages, page_sizes[r - NSINGLE] >> 10);
		else
			snprintf(op, sizeof(op), "single %7zu KiB", single_sizes[r] >> 10);
		char nc[32];
		snprintf(nc, sizeof(nc), "%d/%d", ncalls[1], ncalls[0]);
		printf("%-26s %13s %10.2f %10.2f %7.2f  %s\n", op, nc, gbs[1], gbs[0], gbs[1] / gbs[0],
		       bad_any ? "MISMATCH" : "verified");
		fflush(stdout);
	}
	struct req end = {END, 0, 0, 0, 0, 0};
	put_blob(fd, &end, sizeof(end));
	printf("rows failing verification: %d\n", fails);
	for (int g = 0; g < 2; g++)
		xfer_rmr_free(dst[g]);
	ends_close(&x);
	if (ceiling_wanted())
		fails += ceiling_side(fd, 1, host_gbs);
	return fails ? 1 : 0;
}

} // namespace

int staged_bench_main(void)
{
	if (!getenv("XFER_TEST_PROVIDER"))
		setenv("XFER_TEST_PROVIDER", "tcp", 1);
	setenv("XFER_GPU_IPC", "0", 1); // through the mirrors, even on one host
	return run_two(source, target, "staged", "source", "target");
}
