// xfer-gpu-bench: same-host GPU -> GPU through the engine (CUDA IPC path),
// against cudaMemcpyPeerAsync measured in the same run. Single writes of
// 64 KiB .. 1 GiB and paged writes of 16..64 KiB pages; each xfer row prints
// its ratio to the baseline. Provider for addresses and notices: shm.
#include <algorithm>
#include <time.h>
#include <vector>

#include "gpu_common.h"

static const size_t sizes[] = {64u << 10, 1u << 20, 16u << 20, 256u << 20, 1u << 30};
#define NS (sizeof(sizes) / sizeof(sizes[0]))
static const uint32_t page_sizes[] = {16u << 10, 32u << 10, 64u << 10};
#define NP 3
#define PAGES 1024u
#define MAXLEN (1u << 30)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int iters_for(size_t n) { return n >= (256u << 20) ? 10 : n >= (16u << 20) ? 50 : 200; }

// Baseline, one process: GB/s per size, written to the pipe.
static void baseline(int fd, int dst_dev)
{
	CK(cudaSetDevice(0));
	int can = 0;
	if (dst_dev != 0) {
		CK(cudaDeviceCanAccessPeer(&can, 0, dst_dev));
		if (can)
			cudaDeviceEnablePeerAccess(dst_dev, 0);
	}
	void *src, *dst;
	CK(cudaMalloc(&src, MAXLEN));
	CK(cudaSetDevice(dst_dev));
	CK(cudaMalloc(&dst, MAXLEN));
	CK(cudaSetDevice(0));
	cudaStream_t s;
	CK(cudaStreamCreate(&s));
	double r[NS + NP];
	for (size_t i = 0; i < NS; i++) {
		int it = iters_for(sizes[i]);
		CK(cudaMemcpyPeerAsync(dst, dst_dev, src, 0, sizes[i], s));
		CK(cudaStreamSynchronize(s));
		double t0 = now_s();
		for (int k = 0; k < it; k++)
			CK(cudaMemcpyPeerAsync(dst, dst_dev, src, 0, sizes[i], s));
		CK(cudaStreamSynchronize(s));
		r[i] = (double)sizes[i] * it / (now_s() - t0) / 1e9;
	}
	for (int p = 0; p < NP; p++) {
		double t0 = now_s();
		for (uint32_t k = 0; k < PAGES; k++)
			CK(cudaMemcpyPeerAsync((char *)dst + (size_t)((k * 7919u) % PAGES) * page_sizes[p], dst_dev,
					       (char *)src + (size_t)k * page_sizes[p], 0, page_sizes[p], s));
		CK(cudaStreamSynchronize(s));
		r[NS + p] = (double)PAGES * page_sizes[p] / (now_s() - t0) / 1e9;
	}
	put_blob(fd, r, sizeof(r));
}

static double base[NS + NP];
static int dst_dev;

static int sender(int fd)
{
	CK(cudaSetDevice(0));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	void *src;
	CK(cudaMalloc(&src, MAXLEN));
	xfer_mr_t *mr;
	XK(xfer_mr_reg(e, src, MAXLEN, &mr));
	uint8_t desc[XFER_DESC_MAX];
	size_t dl = get_blob(fd, desc, sizeof(desc));
	xfer_rmr_t *dst;
	XK(xfer_rmr_import(e, peer, desc, dl, &dst));
	double r[NS + NP];
	for (size_t i = 0; i < NS; i++) {
		int it = iters_for(sizes[i]);
		struct xfer_write w;
		memset(&w, 0, sizeof(w));
		w.src = mr;
		w.dst = dst;
		w.len = sizes[i];
		w.imm = 100 + (uint32_t)i;
		w.flags = XFER_F_IMM;
		XK(xfer_write(e, &w, NULL)); // warm-up (opens the IPC mapping)
		XK(gpu_wait(e).res);
		double t0 = now_s();
		for (int k = 0; k < it; k++)
			XK(xfer_write(e, &w, NULL));
		for (int k = 0; k < it; k++)
			XK(gpu_wait(e).res);
		r[i] = (double)sizes[i] * it / (now_s() - t0) / 1e9;
	}
	std::vector<uint32_t> sp(PAGES), dp(PAGES);
	for (uint32_t k = 0; k < PAGES; k++) {
		sp[k] = k;
		dp[k] = (k * 7919u) % PAGES;
	}
	for (int p = 0; p < NP; p++) {
		struct xfer_paged_write pw;
		memset(&pw, 0, sizeof(pw));
		pw.src = mr;
		pw.dst = dst;
		pw.page_len = page_sizes[p];
		pw.src_pages = sp.data();
		pw.src_stride = page_sizes[p];
		pw.dst_pages = dp.data();
		pw.dst_stride = page_sizes[p];
		pw.npages = PAGES;
		pw.imm = 200 + (uint32_t)p;
		pw.flags = XFER_F_IMM;
		double t0 = now_s();
		XK(xfer_write_paged(e, &pw, NULL));
		XK(gpu_wait(e).res);
		r[NS + p] = (double)PAGES * page_sizes[p] / (now_s() - t0) / 1e9;
	}
	send_u64(fd, 1);
	printf("same-host GPU0 -> GPU%d, xfer (CUDA IPC path) vs cudaMemcpyPeerAsync, same run\n", dst_dev);
	printf("%-22s %12s %12s %8s\n", "op", "xfer GB/s", "peer GB/s", "ratio");
	for (size_t i = 0; i < NS; i++)
		printf("single %-15zu %12.2f %12.2f %8.2f\n", sizes[i], r[i], base[i], r[i] / base[i]);
	for (int p = 0; p < NP; p++)
		printf("paged %4u x %-9u %12.2f %12.2f %8.2f\n", PAGES, page_sizes[p], r[NS + p], base[NS + p],
		       r[NS + p] / base[NS + p]);
	if (recv_u64(fd) != 2)
		return 1;
	xfer_rmr_free(dst);
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	return 0;
}

static int receiver(int fd, int dev)
{
	CK(cudaSetDevice(dev));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	void *dst;
	CK(cudaMalloc(&dst, MAXLEN));
	xfer_mr_t *mr;
	XK(xfer_mr_reg(e, dst, MAXLEN, &mr));
	uint8_t desc[XFER_DESC_MAX];
	int dl = xfer_mr_desc(mr, desc, sizeof(desc), NULL);
	put_blob(fd, desc, (size_t)dl);
	if (recv_u64(fd) != 1)
		return 1;
	// Every immediate the sender's writes carried has been counted here.
	for (size_t i = 0; i < NS; i++) {
		uint32_t n = 0;
		XK(xfer_imm_disarm(e, 100 + (uint32_t)i, &n));
		if (n != (uint32_t)iters_for(sizes[i]) + 1) {
			fprintf(stderr, "size %zu: %u immediates, want %d\n", sizes[i], n, iters_for(sizes[i]) + 1);
			return 1;
		}
	}
	for (int p = 0; p < NP; p++) {
		uint32_t n = 0;
		XK(xfer_imm_disarm(e, 200 + (uint32_t)p, &n));
		if (n != PAGES) {
			fprintf(stderr, "paged %d: %u immediates, want %u\n", p, n, PAGES);
			return 1;
		}
	}
	send_u64(fd, 2);
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	return 0;
}

int main(void)
{
	int gpus = gpu_count_forksafe();
	if (!gpus) {
		fprintf(stderr, "SKIP: no GPU here\n");
		return 77;
	}
	dst_dev = gpus > 1 ? 1 : 0;
	if (!getenv("XFER_TEST_PROVIDER"))
		setenv("XFER_TEST_PROVIDER", "shm", 1);
	int bp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, bp))
		return 1;
	pid_t p = fork();
	if (p == 0)
		_exit((baseline(bp[1], dst_dev), 0));
	get_blob(bp[0], base, sizeof(base));
	waitpid(p, NULL, 0);

	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid_t rx = fork();
	if (rx == 0) {
		close(sv[0]);
		int rc_ = receiver(sv[1], dst_dev);
		fflush(stdout);
		_exit(rc_);
	}
	close(sv[1]);
	pid_t tx = fork();
	if (tx == 0) {
		int rc_ = sender(sv[0]);
		fflush(stdout);
		_exit(rc_);
	}
	int st1 = 0, st2 = 0;
	waitpid(tx, &st1, 0);
	waitpid(rx, &st2, 0);
	if (!WIFEXITED(st1) || WEXITSTATUS(st1) || !WIFEXITED(st2) || WEXITSTATUS(st2)) {
		fprintf(stderr, "xfer run failed\n");
		return 1;
	}
	return 0;
}
