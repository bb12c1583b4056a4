// GPU memory through the engine, two processes on one host:
//   ipc     GPU -> GPU through CUDA IPC (NVLink between two H200s)
//   staged  GPU -> GPU through pinned host mirrors and notices (XFER_GPU_IPC=0)
//   h2g     host -> GPU,  g2h  GPU -> host
//   native  GPU -> GPU written in place through FI_HMEM (XFER_GPU_IPC=0,
//           XFER_GPU_NATIVE=1); exits 77 (skipped) unless both ends' NICs
//           really register GPU memory in place
// Single writes and paged writes are verified byte for byte on the GPU of the
// receiver, which learns of them only from immediate counters.
//   scatter-ipc | scatter-staged | scatter-native  one scatter of 12 entries
//           (lengths 0 .. 3 MiB) into a GPU region and a host region of the
//           receiver, first from a GPU source, then from a host source;
//           verified on both, with one completion and every entry's status
// Then the watcher inside a CUDA Graph: a captured kernel bumps the word, the
// host callback answers, and the kernel times the round trip.
//   watcher-latency  events 2 ms and 100 us apart, 2,000 each in one graph,
//           default watcher (spin mode) then hybrid (spin_us 50): one-way
//           p50/p99 (half the round trip)
#include <algorithm>
#include <vector>

#include "gpu_common.h"
#include "gpu_pattern.h"

#define LEN (64u << 20)
#define PAGES 4096u
#define PAGE (16u << 10)
// Then pages of odd lengths, strides and bases: the copy kernel's unaligned
// path (no 16-byte vectors).
#define OPAGES 2000u
#define OPAGE 1000u
#define OSRC_STRIDE 1003u
#define ODST_STRIDE 1001u
#define OSRC_BASE 5u
#define ODST_BASE 3u

static const char *mode = "ipc";

__global__ void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = (uint8_t)((i * 2654435761u + seed) >> 7);
}

static void host_fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((i * 2654435761u + seed) >> 7);
}

static bool src_on_gpu(void) { return strcmp(mode, "h2g") != 0; }
static bool dst_on_gpu(void) { return strcmp(mode, "g2h") != 0; }
static bool native_mode(void) { return strstr(mode, "native") != NULL; }

static const char *gpu_path(xfer_engine_t *e)
{
	struct xfer_nic_info ni;
	XK(xfer_engine_nic_info(e, 0, &ni));
	return ni.gpu_path;
}

// In the native modes both ends must have registered GPU memory in place;
// where a provider offers no usable FI_HMEM (it then stages) both skip.
static bool native_ok(int fd, xfer_engine_t *e)
{
	if (!native_mode())
		return true;
	uint64_t mine = !strcmp(gpu_path(e), "native");
	send_u64(fd, mine);
	uint64_t theirs = recv_u64(fd);
	if (!mine || !theirs)
		printf("SKIP: %s: no usable FI_HMEM on %s (this end: %s)\n", mode,
		       xfer_engine_provider(e), gpu_path(e));
	return mine && theirs;
}

static int sender(int fd, int dev)
{
	CK(cudaSetDevice(dev));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	uint8_t *src;
	if (src_on_gpu()) {
		CK(cudaMalloc(&src, LEN));
		fill<<<256, 256>>>(src, LEN, 7);
		CK(cudaDeviceSynchronize());
	} else {
		src = (uint8_t *)malloc(LEN);
		host_fill(src, LEN, 7);
	}
	xfer_mr_t *mr;
	XK(xfer_mr_reg(e, src, LEN, &mr));
	if ((xfer_mr_is_gpu(mr) >= 0) != src_on_gpu()) {
		fprintf(stderr, "region kind not detected\n");
		return 1;
	}
	if (!native_ok(fd, e))
		return 77;
	uint8_t desc[XFER_DESC_MAX];
	size_t dl = get_blob(fd, desc, sizeof(desc));
	xfer_rmr_t *dst;
	XK(xfer_rmr_import(e, peer, desc, dl, &dst));
	struct xfer_write w;
	memset(&w, 0, sizeof(w));
	w.src = mr;
	w.dst = dst;
	w.len = LEN;
	w.imm = 1;
	w.flags = XFER_F_IMM;
	XK(xfer_write(e, &w, NULL));
	XK(gpu_wait(e).res);
	std::vector<uint32_t> sp = perm_lcg(PAGES, 1), dp = perm_lcg(PAGES, 2);
	struct xfer_paged_write pw;
	memset(&pw, 0, sizeof(pw));
	pw.src = mr;
	pw.dst = dst;
	pw.page_len = PAGE;
	pw.src_pages = sp.data();
	pw.src_stride = PAGE;
	pw.dst_pages = dp.data();
	pw.dst_stride = PAGE;
	pw.npages = PAGES;
	pw.imm = 2;
	pw.flags = XFER_F_IMM;
	if (recv_u64(fd) != 1)
		return 1;
	XK(xfer_write_paged(e, &pw, NULL));
	XK(gpu_wait(e).res);
	if (recv_u64(fd) != 2)
		return 1;
	std::vector<uint32_t> osp = perm_lcg(OPAGES, 3), odp = perm_lcg(OPAGES, 4);
	pw.page_len = OPAGE;
	pw.src_pages = osp.data();
	pw.src_stride = OSRC_STRIDE;
	pw.src_base = OSRC_BASE;
	pw.dst_pages = odp.data();
	pw.dst_stride = ODST_STRIDE;
	pw.dst_base = ODST_BASE;
	pw.npages = OPAGES;
	pw.imm = 3;
	XK(xfer_write_paged(e, &pw, NULL));
	XK(gpu_wait(e).res);
	if (recv_u64(fd) != 3)
		return 1;
	xfer_rmr_free(dst);
	XK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	return 0;
}

static int receiver(int fd, int dev)
{
	CK(cudaSetDevice(dev));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	uint8_t *dst;
	if (dst_on_gpu()) {
		CK(cudaMalloc(&dst, LEN));
		CK(cudaMemset(dst, 0, LEN));
		/* The engine copies on its own non-blocking stream: memory must be
		 * ready before it is handed over, as with any RDMA library. */
		CK(cudaDeviceSynchronize());
	} else {
		dst = (uint8_t *)calloc(1, LEN);
	}
	xfer_mr_t *mr;
	XK(xfer_mr_reg(e, dst, LEN, &mr));
	if (!native_ok(fd, e))
		return 77;
	struct xfer_completion c;
	memset(&c, 0, sizeof(c));
	XK(xfer_expect_imm(e, 1, 1, &c));
	uint8_t desc[XFER_DESC_MAX];
	int dl = xfer_mr_desc(mr, desc, sizeof(desc), NULL);
	XK(dl);
	put_blob(fd, desc, (size_t)dl);
	XK(gpu_wait(e).res);
	std::vector<uint8_t> got(LEN), want(LEN);
	host_fill(want.data(), LEN, 7);
	if (dst_on_gpu())
		CK(cudaMemcpy(got.data(), dst, LEN, cudaMemcpyDeviceToHost));
	else
		memcpy(got.data(), dst, LEN);
	if (memcmp(got.data(), want.data(), LEN) != 0) {
		fprintf(stderr, "%s: single write corrupted\n", mode);
		return 1;
	}
	XK(xfer_expect_imm(e, 2, PAGES, &c));
	send_u64(fd, 1);
	XK(gpu_wait(e).res);
	if (dst_on_gpu())
		CK(cudaMemcpy(got.data(), dst, LEN, cudaMemcpyDeviceToHost));
	else
		memcpy(got.data(), dst, LEN);
	std::vector<uint32_t> sp = perm_lcg(PAGES, 1), dp = perm_lcg(PAGES, 2);
	for (uint32_t i = 0; i < PAGES; i++)
		if (memcmp(&got[(size_t)dp[i] * PAGE], &want[(size_t)sp[i] * PAGE], PAGE) != 0) {
			fprintf(stderr, "%s: page %u corrupted\n", mode, i);
			return 1;
		}
	XK(xfer_expect_imm(e, 3, OPAGES, &c));
	send_u64(fd, 2);
	XK(gpu_wait(e).res);
	if (dst_on_gpu())
		CK(cudaMemcpy(got.data(), dst, LEN, cudaMemcpyDeviceToHost));
	else
		memcpy(got.data(), dst, LEN);
	std::vector<uint32_t> osp = perm_lcg(OPAGES, 3), odp = perm_lcg(OPAGES, 4);
	for (uint32_t i = 0; i < OPAGES; i++)
		if (memcmp(&got[ODST_BASE + (size_t)odp[i] * ODST_STRIDE], &want[OSRC_BASE + (size_t)osp[i] * OSRC_STRIDE],
			   OPAGE) != 0) {
			fprintf(stderr, "%s: odd page %u corrupted\n", mode, i);
			return 1;
		}
	printf("%s: 64 MiB single write, %u x 16 KiB pages and %u x %u-byte odd pages verified on %s\n", mode, PAGES,
	       OPAGES, OPAGE, dst_on_gpu() ? "the GPU" : "the host");
	send_u64(fd, 3);
	XK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	return 0;
}

// ------------------------------------------------------------- scatter

#define SC_LEN (16u << 20)
#define SC_N 12
static const uint64_t sc_lens[SC_N] = {4096, 0, 0, 1, (1u << 20) + 3, 65537, 3u << 20, 777, 1, 0, 8192, 100000};

// Entry k: even k into the receiver's GPU region, odd k into its host one;
// each its own slice, with a gap after it that must stay zero.
static struct xfer_scatter_entry sc_entry(int k)
{
	struct xfer_scatter_entry en;
	memset(&en, 0, sizeof(en));
	en.member = 0;
	en.len = sc_lens[k];
	en.src_off = (uint64_t)k * (1u << 20) + 5;
	en.dst_off = (uint64_t)(k / 2) * ((3u << 20) + 4096) + 16;
	return en;
}

static int scatter_sender(int fd, int dev)
{
	CK(cudaSetDevice(dev));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	uint8_t *gsrc, *hsrc = (uint8_t *)malloc(SC_LEN);
	CK(cudaMalloc(&gsrc, SC_LEN));
	fill<<<256, 256>>>(gsrc, SC_LEN, 11);
	CK(cudaDeviceSynchronize());
	host_fill(hsrc, SC_LEN, 12);
	xfer_mr_t *gmr, *hmr;
	XK(xfer_mr_reg(e, gsrc, SC_LEN, &gmr));
	XK(xfer_mr_reg(e, hsrc, SC_LEN, &hmr));
	if (!native_ok(fd, e))
		return 77;
	uint8_t desc[XFER_DESC_MAX];
	size_t dl = get_blob(fd, desc, sizeof(desc));
	xfer_rmr_t *gdst, *hdst;
	XK(xfer_rmr_import(e, peer, desc, dl, &gdst));
	dl = get_blob(fd, desc, sizeof(desc));
	XK(xfer_rmr_import(e, peer, desc, dl, &hdst));
	xfer_group_t *g;
	XK(xfer_group_create(e, &peer, 1, &g));
	struct xfer_scatter_entry en[SC_N];
	int32_t status[SC_N];
	for (int k = 0; k < SC_N; k++) {
		en[k] = sc_entry(k);
		en[k].dst = k % 2 ? hdst : gdst;
	}
	for (int round = 0; round < 2; round++) {
		if (recv_u64(fd) != 10 + (uint64_t)round)
			return 1;
		for (int k = 0; k < SC_N; k++)
			status[k] = 12345;
		struct xfer_scatter sc;
		memset(&sc, 0, sizeof(sc));
		sc.src = round == 0 ? gmr : hmr;
		sc.entries = en;
		sc.n = SC_N;
		sc.imm = 10 + round;
		sc.flags = XFER_F_IMM;
		sc.status = status;
		struct xfer_completion c;
		memset(&c, 0, sizeof(c));
		c.user_data = 77 + round;
		XK(xfer_scatter(e, g, &sc, &c));
		struct xfer_cqe cqe = gpu_wait(e);
		XK(cqe.res);
		if (cqe.user_data != 77 + (uint64_t)round || cqe.kind != XFER_OP_SCATTER) {
			fprintf(stderr, "%s: wrong completion\n", mode);
			return 1;
		}
		for (int k = 0; k < SC_N; k++)
			if (status[k] != 0) {
				fprintf(stderr, "%s: entry %d status %d\n", mode, k, status[k]);
				return 1;
			}
		struct xfer_cqe extra;
		if (xfer_cq_poll(e, &extra, 1) != 0) {
			fprintf(stderr, "%s: a second completion\n", mode);
			return 1;
		}
		send_u64(fd, 20 + round);
	}
	if (recv_u64(fd) != 30)
		return 1;
	XK(xfer_group_destroy(g));
	xfer_rmr_free(gdst);
	xfer_rmr_free(hdst);
	XK(xfer_mr_dereg(gmr));
	XK(xfer_mr_dereg(hmr));
	xfer_engine_destroy(e);
	CK(cudaFree(gsrc));
	free(hsrc);
	return 0;
}

static int scatter_receiver(int fd, int dev)
{
	CK(cudaSetDevice(dev));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	uint8_t *gdst, *hdst = (uint8_t *)calloc(1, SC_LEN);
	CK(cudaMalloc(&gdst, SC_LEN));
	xfer_mr_t *gmr, *hmr;
	XK(xfer_mr_reg(e, gdst, SC_LEN, &gmr));
	XK(xfer_mr_reg(e, hdst, SC_LEN, &hmr));
	if (!native_ok(fd, e))
		return 77;
	uint8_t desc[XFER_DESC_MAX];
	int dl = xfer_mr_desc(gmr, desc, sizeof(desc), NULL);
	XK(dl);
	put_blob(fd, desc, (size_t)dl);
	dl = xfer_mr_desc(hmr, desc, sizeof(desc), NULL);
	XK(dl);
	put_blob(fd, desc, (size_t)dl);
	std::vector<uint8_t> got(SC_LEN), want(SC_LEN);
	for (int round = 0; round < 2; round++) {
		CK(cudaMemset(gdst, 0, SC_LEN));
		CK(cudaDeviceSynchronize());
		memset(hdst, 0, SC_LEN);
		struct xfer_completion c;
		memset(&c, 0, sizeof(c));
		XK(xfer_expect_imm(e, 10 + round, SC_N, &c));
		send_u64(fd, 10 + round);
		XK(gpu_wait(e).res);
		host_fill(want.data(), SC_LEN, round == 0 ? 11 : 12);
		CK(cudaMemcpy(got.data(), gdst, SC_LEN, cudaMemcpyDeviceToHost));
		for (int k = 0; k < SC_N; k++) {
			struct xfer_scatter_entry en = sc_entry(k);
			const uint8_t *d = (k % 2 ? hdst : got.data()) + en.dst_off;
			if (memcmp(d, want.data() + en.src_off, en.len) != 0 || d[en.len] != 0) {
				fprintf(stderr, "%s: round %d entry %d (%s, %llu bytes) wrong\n", mode, round, k,
					k % 2 ? "host" : "GPU", (unsigned long long)en.len);
				return 1;
			}
		}
		if (recv_u64(fd) != 20 + (uint64_t)round)
			return 1;
	}
	printf("%s: %d entries (0 .. 3 MiB) into a GPU and a host region, from a GPU and a host "
	       "source, verified\n", mode, SC_N);
	send_u64(fd, 30);
	XK(xfer_mr_dereg(gmr));
	XK(xfer_mr_dereg(hmr));
	xfer_engine_destroy(e);
	CK(cudaFree(gdst));
	free(hdst);
	return 0;
}

// ------------------------------------------------------------- watcher

struct ack_ctx {
	volatile uint64_t *ack;
	uint64_t calls;
};

static void on_bump(void *ctx, uint64_t old_value, uint64_t new_value)
{
	(void)old_value;
	struct ack_ctx *a = (struct ack_ctx *)ctx;
	a->calls++;
	__atomic_store_n(a->ack, new_value, __ATOMIC_RELEASE);
}

__global__ void bump(volatile uint64_t *word, volatile uint64_t *ack, uint64_t *rtt_ns, uint64_t *step)
{
	uint64_t v = *step + 1, t0, t1;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	__threadfence_system();
	*word = v;
	__threadfence_system();
	while (*ack != v)
		;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
	rtt_ns[v - 1] = t1 - t0;
	*step = v;
}

static int watcher_case(void)
{
	const int N = 2000;
	CK(cudaSetDevice(0));
	struct ack_ctx a = {};
	uint64_t *ack_host;
	CK(cudaHostAlloc(&ack_host, 64, cudaHostAllocMapped | cudaHostAllocPortable));
	*ack_host = 0;
	a.ack = ack_host;
	xfer_watcher_t *w;
	XK(xfer_watcher_create(on_bump, &a, 100000, &w));
	uint64_t word_dev = xfer_watcher_device_ptr(w);
	if (!word_dev) {
		fprintf(stderr, "watcher word is not mapped into the GPU\n");
		return 1;
	}
	uint64_t *ack_dev, *rtt, *step;
	CK(cudaHostGetDevicePointer((void **)&ack_dev, ack_host, 0));
	CK(cudaMalloc(&rtt, N * sizeof(uint64_t)));
	CK(cudaMalloc(&step, sizeof(uint64_t)));
	CK(cudaMemset(step, 0, sizeof(uint64_t)));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	bump<<<1, 1, 0, s>>>((volatile uint64_t *)word_dev, (volatile uint64_t *)ack_dev, rtt, step);
	CK(cudaStreamEndCapture(s, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	for (int i = 0; i < N; i++)
		CK(cudaGraphLaunch(ge, s));
	CK(cudaStreamSynchronize(s));
	std::vector<uint64_t> r(N);
	CK(cudaMemcpy(r.data(), rtt, N * sizeof(uint64_t), cudaMemcpyDeviceToHost));
	xfer_watcher_destroy(w);
	if (a.calls != (uint64_t)N || *ack_host != (uint64_t)N) {
		fprintf(stderr, "watcher saw %llu of %d bumps\n", (unsigned long long)a.calls, N);
		return 1;
	}
	std::sort(r.begin(), r.end());
	printf("watcher in a CUDA Graph, %d replays: kernel store -> host callback -> kernel sees ack: "
	       "p50 %.2f us, p99 %.2f us, max %.2f us (round trip; one way ~ half)\n",
	       N, r[N / 2] / 1e3, r[N * 99 / 100] / 1e3, r[N - 1] / 1e3);
	return 0;
}

// Issue 14's latency case: events `gap_ns` apart (a layer's compute time),
// all from one kernel in one CUDA Graph launch, watcher at the given spin_us
// (0: the default, spin mode for a GPU word). Each event: the kernel stores
// the word, the callback stores the ack into mapped host memory, the kernel
// sees it; one way is estimated as half that round trip (both legs cross
// the same bus).
__global__ void bump_spaced(volatile uint64_t *word, volatile uint64_t *ack, uint64_t *rtt_ns, int n, uint64_t gap_ns)
{
	for (int i = 0; i < n; i++) {
		uint64_t v = (uint64_t)i + 1, t0, t1, start;
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
		do
			asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
		while (t0 - start < gap_ns);
		__threadfence_system();
		*word = v;
		__threadfence_system();
		while (*ack != v)
			;
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
		rtt_ns[i] = t1 - t0;
	}
}

static int latency_run(uint32_t spin_us, const char *label, uint64_t gap_ns, int n)
{
	struct ack_ctx a = {};
	uint64_t *ack_host, *ack_dev, *rtt;
	CK(cudaHostAlloc(&ack_host, 64, cudaHostAllocMapped | cudaHostAllocPortable));
	*ack_host = 0;
	a.ack = ack_host;
	xfer_watcher_t *w;
	XK(xfer_watcher_create(on_bump, &a, spin_us, &w));
	uint64_t word_dev = xfer_watcher_device_ptr(w);
	if (!word_dev) {
		fprintf(stderr, "watcher word is not mapped into the GPU\n");
		return 1;
	}
	CK(cudaHostGetDevicePointer((void **)&ack_dev, ack_host, 0));
	CK(cudaMalloc(&rtt, n * sizeof(uint64_t)));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	bump_spaced<<<1, 1, 0, s>>>((volatile uint64_t *)word_dev, (volatile uint64_t *)ack_dev, rtt, n, gap_ns);
	CK(cudaStreamEndCapture(s, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	CK(cudaGraphLaunch(ge, s));
	CK(cudaStreamSynchronize(s));
	std::vector<uint64_t> r(n);
	CK(cudaMemcpy(r.data(), rtt, n * sizeof(uint64_t), cudaMemcpyDeviceToHost));
	xfer_watcher_destroy(w);
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaStreamDestroy(s));
	CK(cudaFree(rtt));
	CK(cudaFreeHost(ack_host));
	if (a.calls != (uint64_t)n) {
		fprintf(stderr, "watcher saw %llu of %d events\n", (unsigned long long)a.calls, n);
		return 1;
	}
	std::sort(r.begin(), r.end());
	printf("watcher %-22s events %6.0f us apart, %d in one CUDA Graph: one way p50 %6.2f us, p99 %6.2f us "
	       "(round trip p50 %.2f, p99 %.2f, max %.2f us)\n",
	       label, gap_ns / 1e3, n, r[n / 2] / 2e3, r[n * 99 / 100] / 2e3, r[n / 2] / 1e3, r[n * 99 / 100] / 1e3,
	       r[n - 1] / 1e3);
	return 0;
}

static int watcher_latency(void)
{
	CK(cudaSetDevice(0));
	int rc = 0;
	rc |= latency_run(0, "default (spin mode)", 2000000, 2000);
	rc |= latency_run(0, "default (spin mode)", 100000, 2000);
	rc |= latency_run(50, "hybrid, spin_us 50", 2000000, 2000);
	rc |= latency_run(50, "hybrid, spin_us 50", 100000, 2000);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		mode = argv[1];
	int gpus = gpu_count_forksafe();
	if (gpus == 0) {
		fprintf(stderr, "SKIP: no GPU here\n");
		return 77;
	}
	if (!strcmp(mode, "watcher"))
		return watcher_case();
	if (!strcmp(mode, "watcher-latency"))
		return watcher_latency();
	if (strstr(mode, "staged"))
		setenv("XFER_GPU_IPC", "0", 1);
	if (native_mode()) {
		setenv("XFER_GPU_IPC", "0", 1);
		setenv("XFER_GPU_NATIVE", "1", 1);
	}
	bool scatter = !strncmp(mode, "scatter", 7);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid_t p = fork();
	if (p == 0) {
		close(sv[0]);
		int rc_ = (scatter ? scatter_receiver : receiver)(sv[1], gpus > 1 ? 1 : 0);
		fflush(stdout);
		_exit(rc_);
	}
	close(sv[1]);
	int rc = (scatter ? scatter_sender : sender)(sv[0], 0);
	int st = 0;
	waitpid(p, &st, 0);
	if (rc == 77 && WIFEXITED(st) && WEXITSTATUS(st) == 77)
		return 77;
	return rc || !WIFEXITED(st) || WEXITSTATUS(st) ? 1 : 0;
}
