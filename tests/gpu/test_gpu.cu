// GPU memory through the engine, two processes on one host:
//   ipc     GPU -> GPU through CUDA IPC (NVLink between two H200s)
//   staged  GPU -> GPU through pinned host mirrors and notices (XFER_GPU_IPC=0)
//   h2g     host -> GPU,  g2h  GPU -> host
// Single writes and paged writes are verified byte for byte on the GPU of the
// receiver, which learns of them only from immediate counters. Then the
// watcher inside a CUDA Graph: a captured kernel bumps the word, the host
// callback answers, and the kernel times the round trip.
#include <algorithm>
#include <vector>

#include "gpu_common.h"

#define LEN (64u << 20)
#define PAGES 4096u
#define PAGE (16u << 10)

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

static std::vector<uint32_t> perm(uint32_t n, uint32_t seed)
{
	std::vector<uint32_t> v(n);
	for (uint32_t i = 0; i < n; i++)
		v[i] = i;
	uint64_t s = seed;
	for (uint32_t i = n - 1; i > 0; i--) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		std::swap(v[i], v[(s >> 33) % (i + 1)]);
	}
	return v;
}

static bool src_on_gpu(void) { return strcmp(mode, "h2g") != 0; }
static bool dst_on_gpu(void) { return strcmp(mode, "g2h") != 0; }

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
	std::vector<uint32_t> sp = perm(PAGES, 1), dp = perm(PAGES, 2);
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
	} else {
		dst = (uint8_t *)calloc(1, LEN);
	}
	xfer_mr_t *mr;
	XK(xfer_mr_reg(e, dst, LEN, &mr));
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
	std::vector<uint32_t> sp = perm(PAGES, 1), dp = perm(PAGES, 2);
	for (uint32_t i = 0; i < PAGES; i++)
		if (memcmp(&got[(size_t)dp[i] * PAGE], &want[(size_t)sp[i] * PAGE], PAGE) != 0) {
			fprintf(stderr, "%s: page %u corrupted\n", mode, i);
			return 1;
		}
	printf("%s: 64 MiB single write and %u x 16 KiB pages verified on %s\n", mode, PAGES,
	       dst_on_gpu() ? "the GPU" : "the host");
	send_u64(fd, 2);
	XK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
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
	if (!strcmp(mode, "staged"))
		setenv("XFER_GPU_IPC", "0", 1);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid_t p = fork();
	if (p == 0) {
		close(sv[0]);
		int rc_ = receiver(sv[1], gpus > 1 ? 1 : 0);
		fflush(stdout);
		_exit(rc_);
	}
	close(sv[1]);
	int rc = sender(sv[0], 0);
	int st = 0;
	waitpid(p, &st, 0);
	return rc || !WIFEXITED(st) || WEXITSTATUS(st) ? 1 : 0;
}
