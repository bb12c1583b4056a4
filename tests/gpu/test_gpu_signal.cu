// A GPU kernel that waits for transferred data on the device itself: the
// receiver arms one immediate counter per "layer" of KV-like pages, each
// with a completion signal word in mapped pinned memory
// (xfer_completion.signal), then launches ONE consumer kernel before any
// byte has arrived. Block l of the kernel spins on word l and, as soon as the
// worker stores it (just before it delivers the counter's completion, which
// is after the layer's last page is visible in GPU memory), checks the
// layer's pages. No stream synchronization, event or host callback sits
// between the arrival and the kernel: the path the MoE and KV consumers need.
// The sender writes the layers 2 ms apart (a layer's compute time), so the
// kernel really waits; it records when each layer's word flipped
// (%globaltimer) to show the layers were consumed one by one.
//
//   test_gpu_signal [ipc|staged]   (staged: XFER_GPU_IPC=0, through the
//                                   host mirrors and the target's landings)
#include <time.h>
#include <vector>

#include "gpu_common.h"
#include "gpu_pattern.h"

#define LAYERS 8
#define NP 256u
#define PG (16u << 10)
#define LEN ((size_t)LAYERS * NP * PG)
#define IMM0 100u
#define SEED 7u

static __host__ __device__ inline uint8_t byte_at(size_t i) { return (uint8_t)((i * 2654435761u + SEED) >> 7); }

__global__ void sfill(uint8_t *p, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = byte_at(i);
}

static __device__ uint64_t gtimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// Block l: wait for word l, then page dp[i] of layer l must hold source page
// sp[i] of layer l (lists of every layer back to back).
__global__ void consume(const volatile uint64_t *words, const uint8_t *dst, const uint32_t *sp, const uint32_t *dp,
			unsigned long long *bad, unsigned long long *seen_ns)
{
	const uint32_t l = blockIdx.x;
	if (threadIdx.x == 0) {
		while (words[l * 8] == 0)
			__nanosleep(100);
		seen_ns[l] = gtimer();
		__threadfence();
	}
	__syncthreads();
	unsigned long long nbad = 0;
	for (uint32_t i = 0; i < NP; i++) {
		size_t so = ((size_t)l * NP + sp[l * NP + i]) * PG, d0 = ((size_t)l * NP + dp[l * NP + i]) * PG;
		for (uint32_t b = threadIdx.x; b < PG; b += blockDim.x)
			nbad += __ldcv(dst + d0 + b) != byte_at(so + b);
	}
	atomicAdd(bad, nbad);
}

static void lists(std::vector<uint32_t> &sp, std::vector<uint32_t> &dp)
{
	sp.clear();
	dp.clear();
	for (uint32_t l = 0; l < LAYERS; l++) {
		std::vector<uint32_t> a = perm_lcg(NP, 10 + l), b = perm_lcg(NP, 50 + l);
		sp.insert(sp.end(), a.begin(), a.end());
		dp.insert(dp.end(), b.begin(), b.end());
	}
}

static int sender(int fd)
{
	CK(cudaSetDevice(0));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	uint8_t *src;
	CK(cudaMalloc(&src, LEN));
	sfill<<<264, 512>>>(src, LEN);
	CK(cudaDeviceSynchronize());
	xfer_mr_t *mr;
	XK(xfer_mr_reg(e, src, LEN, &mr));
	uint8_t desc[XFER_DESC_MAX];
	size_t dl = get_blob(fd, desc, sizeof(desc));
	xfer_rmr_t *dst;
	XK(xfer_rmr_import(e, peer, desc, dl, &dst));
	std::vector<uint32_t> sp, dp;
	lists(sp, dp);
	if (recv_u64(fd) != 1) // the consumer kernel is running
		return 1;
	for (uint32_t l = 0; l < LAYERS; l++) {
		struct timespec gap = {0, 2000000};
		nanosleep(&gap, NULL);
		struct xfer_paged_write pw;
		memset(&pw, 0, sizeof(pw));
		pw.src = mr;
		pw.dst = dst;
		pw.page_len = PG;
		pw.src_pages = &sp[l * NP];
		pw.src_stride = PG;
		pw.src_base = (uint64_t)l * NP * PG;
		pw.dst_pages = &dp[l * NP];
		pw.dst_stride = PG;
		pw.dst_base = (uint64_t)l * NP * PG;
		pw.npages = NP;
		pw.imm = IMM0 + l;
		pw.flags = XFER_F_IMM;
		XK(xfer_write_paged(e, &pw, NULL));
		XK(gpu_wait(e).res);
	}
	if (recv_u64(fd) != 2)
		return 1;
	xfer_rmr_free(dst);
	XK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	CK(cudaFree(src));
	return 0;
}

static int receiver(int fd, const char *mode)
{
	CK(cudaSetDevice(0));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	uint8_t *dst;
	CK(cudaMalloc(&dst, LEN));
	CK(cudaMemset(dst, 0, LEN));
	CK(cudaDeviceSynchronize());
	xfer_mr_t *mr;
	XK(xfer_mr_reg(e, dst, LEN, &mr));
	uint64_t *words, *words_dev;
	CK(cudaHostAlloc(&words, LAYERS * 64, cudaHostAllocMapped));
	memset(words, 0, LAYERS * 64);
	CK(cudaHostGetDevicePointer(&words_dev, words, 0));
	for (uint32_t l = 0; l < LAYERS; l++) {
		struct xfer_completion c;
		memset(&c, 0, sizeof(c));
		c.user_data = l;
		c.timeout_ms = 30000;
		c.signal = (volatile uint64_t *)&words[l * 8];
		c.signal_value = 1;
		XK(xfer_expect_imm(e, IMM0 + l, NP, &c));
	}
	std::vector<uint32_t> sp, dp;
	lists(sp, dp);
	uint32_t *lsp, *ldp;
	unsigned long long *bad, *seen;
	CK(cudaMalloc(&lsp, sp.size() * 4));
	CK(cudaMalloc(&ldp, dp.size() * 4));
	CK(cudaMalloc(&bad, 8));
	CK(cudaMalloc(&seen, LAYERS * 8));
	CK(cudaMemcpy(lsp, sp.data(), sp.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(ldp, dp.data(), dp.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMemset(bad, 0, 8));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	// Launched before any byte arrives; nothing on the host releases it.
	consume<<<LAYERS, 256, 0, s>>>(words_dev, dst, lsp, ldp, bad, seen);
	CK(cudaGetLastError());
	uint8_t desc[XFER_DESC_MAX];
	int dl = xfer_mr_desc(mr, desc, sizeof(desc), NULL);
	XK(dl);
	put_blob(fd, desc, (size_t)dl);
	send_u64(fd, 1);
	int fails = 0;
	for (uint32_t k = 0; k < LAYERS; k++) {
		struct xfer_cqe q = gpu_wait(e);
		if (q.res) {
			fprintf(stderr, "signal: layer %llu: %s\n", (unsigned long long)q.user_data, xfer_strerror(q.res));
			fails++;
		}
	}
	CK(cudaStreamSynchronize(s));
	unsigned long long nbad = 0, t[LAYERS];
	CK(cudaMemcpy(&nbad, bad, 8, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(t, seen, sizeof(t), cudaMemcpyDeviceToHost));
	bool ordered = true;
	for (uint32_t l = 1; l < LAYERS; l++)
		ordered &= t[l] > t[l - 1];
	printf("signal (%s): %u layers x %u x %u KiB pages consumed by one kernel waiting on completion words; "
	       "%llu bad bytes; layers seen %.2f ms apart on average, %s\n",
	       mode, LAYERS, NP, PG >> 10, nbad, (double)(t[LAYERS - 1] - t[0]) / 1e6 / (LAYERS - 1),
	       ordered ? "in order" : "OUT OF ORDER");
	fails += nbad != 0 || !ordered;
	send_u64(fd, 2);
	XK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "ipc";
	if (!gpu_count_forksafe()) {
		fprintf(stderr, "SKIP: no GPU here\n");
		return 77;
	}
	if (!strcmp(mode, "staged"))
		setenv("XFER_GPU_IPC", "0", 1);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid_t p = fork();
	if (p == 0) {
		close(sv[0]);
		int rc = receiver(sv[1], mode);
		fflush(stdout);
		_exit(rc);
	}
	close(sv[1]);
	int rc = sender(sv[0]);
	int st = 0;
	waitpid(p, &st, 0);
	return rc || !WIFEXITED(st) || WEXITSTATUS(st) ? 1 : 0;
}
