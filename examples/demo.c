/* xfer-demo: two processes, one engine each, exchange addresses and region
 * descriptors over a socket (as an application would over its own control
 * plane), then move data with single and paged WRITEs. The receiver learns
 * completion only from immediate counters, verifies every byte, and both
 * sides print what moved and how fast.
 *
 *   xfer-demo [--provider NAME] [--nics LIST] [--mib N] | --version | --help
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "xfer.h"

#define CHUNK (4u << 20)
#define WINDOW 16
#define PAGE 4096u
#define PAGES 10000u
#define IMM_SINGLE 1
#define IMM_PAGED 2

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "xfer-demo: %s: %s\n", what, xfer_strerror(rc));
	exit(1);
}

static void xwrite(int fd, const void *b, size_t n)
{
	if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || write(fd, b, n) != (ssize_t)n)
		die("control socket", -EPIPE);
}

static size_t xread(int fd, void *b, size_t cap)
{
	size_t n, got = 0;
	if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || n > cap)
		die("control socket", -EPROTO);
	while (got < n) {
		ssize_t r = read(fd, (char *)b + got, n - got);
		if (r <= 0)
			die("control socket", -EPIPE);
		got += (size_t)r;
	}
	return n;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i += 8) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		memcpy(p + i, &seed, n - i < 8 ? n - i : 8);
	}
}

static void permutation(uint32_t *p, uint32_t n, uint64_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		p[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t j = (uint32_t)((seed >> 33) % (i + 1)), t = p[i];
		p[i] = p[j];
		p[j] = t;
	}
}

static xfer_engine_t *open_engine(const struct xfer_attr *a, int fd, xfer_peer_t *peer)
{
	xfer_engine_t *e;
	int rc = xfer_engine_create(a, &e);
	if (rc)
		die("creating the engine", rc);
	uint8_t addr[XFER_ADDR_MAX];
	int len = xfer_engine_addr(e, addr, sizeof(addr), NULL);
	if (len < 0)
		die("engine address", len);
	xwrite(fd, addr, (size_t)len);
	size_t plen = xread(fd, addr, sizeof(addr));
	if ((rc = xfer_peer_add(e, addr, plen, peer)))
		die("adding the peer", rc);
	return e;
}

static void reap(xfer_engine_t *e, int n)
{
	struct xfer_cqe c[64];
	while (n > 0) {
		int got = xfer_cq_wait(e, c, n < 64 ? n : 64, 60000);
		if (got < 0)
			die("waiting for completions", got);
		for (int i = 0; i < got; i++)
			if (c[i].res)
				die("a transfer failed", c[i].res);
		n -= got;
	}
}

static int sender(const struct xfer_attr *a, int fd, size_t total)
{
	xfer_peer_t peer;
	xfer_engine_t *e = open_engine(a, fd, &peer);
	uint8_t *src = aligned_alloc(4096, total);
	if (!src)
		die("allocating", -ENOMEM);
	fill(src, total, 42);
	xfer_mr_t *mr;
	int rc = xfer_mr_reg(e, src, total, &mr);
	if (rc)
		die("registering memory", rc);
	uint8_t desc[XFER_DESC_MAX];
	size_t dlen = xread(fd, desc, sizeof(desc));
	xfer_rmr_t *dst;
	if ((rc = xfer_rmr_import(e, peer, desc, dlen, &dst)))
		die("importing the descriptor", rc);

	/* Single writes, WINDOW in flight. */
	uint32_t chunks = (uint32_t)(total / CHUNK), posted = 0, done = 0;
	double t0 = now_s();
	while (done < chunks) {
		while (posted < chunks && posted - done < WINDOW) {
			struct xfer_write w = {.src = mr, .src_off = (uint64_t)posted * CHUNK, .dst = dst,
					       .dst_off = (uint64_t)posted * CHUNK, .len = CHUNK,
					       .imm = IMM_SINGLE, .flags = XFER_F_IMM};
			if ((rc = xfer_write(e, &w, NULL)) == -EAGAIN)
				break;
			if (rc)
				die("write", rc);
			posted++;
		}
		reap(e, 1);
		done++;
	}
	double t_single = now_s() - t0;

	/* One paged write: PAGES pages scattered by a permutation on both sides. */
	uint32_t *sp = malloc(PAGES * 4), *dp = malloc(PAGES * 4);
	permutation(sp, PAGES, 1);
	permutation(dp, PAGES, 2);
	char go;
	if (read(fd, &go, 1) != 1)
		die("control socket", -EPIPE);
	struct xfer_paged_write pw = {.src = mr, .dst = dst, .page_len = PAGE, .src_pages = sp,
				      .src_stride = PAGE, .dst_pages = dp, .dst_stride = PAGE,
				      .npages = PAGES, .imm = IMM_PAGED, .flags = XFER_F_IMM};
	t0 = now_s();
	if ((rc = xfer_write_paged(e, &pw, NULL)))
		die("paged write", rc);
	reap(e, 1);
	double t_paged = now_s() - t0;
	if (read(fd, &go, 1) != 1 || go != 'v')
		die("the receiver could not verify the data", -EIO);
	printf("sender:   single writes %zu MiB in %u x %u MiB: %.3f s, %.2f Gbit/s\n", total >> 20,
	       chunks, CHUNK >> 20, t_single, (double)total * 8 / t_single / 1e9);
	printf("sender:   paged write %u pages x %u B: %.3f s, %.2f Gbit/s, %.0f pages/s\n", PAGES,
	       PAGE, t_paged, (double)PAGES * PAGE * 8 / t_paged / 1e9, PAGES / t_paged);
	xfer_rmr_free(dst);
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	free(src);
	free(sp);
	free(dp);
	return 0;
}

static int receiver(const struct xfer_attr *a, int fd, size_t total)
{
	xfer_peer_t peer;
	xfer_engine_t *e = open_engine(a, fd, &peer);
	uint8_t *dst = aligned_alloc(4096, total), *want = aligned_alloc(4096, total);
	if (!dst || !want)
		die("allocating", -ENOMEM);
	memset(dst, 0, total);
	xfer_mr_t *mr;
	int rc = xfer_mr_reg(e, dst, total, &mr);
	if (rc)
		die("registering memory", rc);
	/* Arm before publishing the descriptor: no arrival can be missed (and
	 * none would be: early arrivals count too). */
	uint32_t chunks = (uint32_t)(total / CHUNK);
	struct xfer_completion c = {.user_data = IMM_SINGLE};
	if ((rc = xfer_expect_imm(e, IMM_SINGLE, chunks, &c)))
		die("expect", rc);
	uint8_t desc[XFER_DESC_MAX];
	int dlen = xfer_mr_desc(mr, desc, sizeof(desc), NULL);
	xwrite(fd, desc, (size_t)dlen);
	double t0 = now_s();
	reap(e, 1);
	double t_single = now_s() - t0;
	fill(want, total, 42);
	int ok = memcmp(dst, want, total) == 0;

	memset(dst, 0, total);
	c.user_data = IMM_PAGED;
	if ((rc = xfer_expect_imm(e, IMM_PAGED, PAGES, &c)))
		die("expect", rc);
	if (write(fd, "g", 1) != 1)
		die("control socket", -EPIPE);
	reap(e, 1);
	uint32_t *sp = malloc(PAGES * 4), *dp = malloc(PAGES * 4);
	permutation(sp, PAGES, 1);
	permutation(dp, PAGES, 2);
	memset(dst + (size_t)PAGES * PAGE, 0, total > (size_t)PAGES * PAGE ? total - (size_t)PAGES * PAGE : 0);
	for (uint32_t i = 0; i < PAGES; i++)
		ok &= memcmp(dst + (size_t)dp[i] * PAGE, want + (size_t)sp[i] * PAGE, PAGE) == 0;
	printf("receiver: %zu MiB by single writes and %u pages by one paged write %s "
	       "(immediate counters fired after %.3f s)\n",
	       total >> 20, PAGES, ok ? "verified byte for byte" : "CORRUPTED", t_single);
	if (write(fd, ok ? "v" : "x", 1) != 1)
		die("control socket", -EPIPE);
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	free(dst);
	free(want);
	free(sp);
	free(dp);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct xfer_attr a;
	size_t mib = 256;
	xfer_attr_init(&a);
	static const char usage[] = "usage: xfer-demo [--provider NAME] [--nics LIST] [--mib N]\n"
				    "       xfer-demo --version | --help\n";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(argv[i], "--version")) {
			printf("xfer-demo (xfer) %s\n", xfer_version());
			return 0;
		} else if (!strcmp(argv[i], "--provider") && i + 1 < argc) {
			a.provider = argv[++i];
		} else if (!strcmp(argv[i], "--nics") && i + 1 < argc) {
			a.nics = argv[++i];
		} else if (!strcmp(argv[i], "--mib") && i + 1 < argc) {
			mib = strtoul(argv[++i], NULL, 0);
		} else {
			fputs(usage, stderr);
			return 2;
		}
	}
	if (mib < 64)
		mib = 64;
	mib = mib / 4 * 4;
	/* Default: TCP on loopback, which every machine has. */
	if (!strcmp(a.provider, "auto") && !a.nics) {
		a.provider = "tcp";
		a.nics = "lo";
	}
	printf("xfer-demo: provider %s%s%s, %zu MiB, two processes\n", a.provider, a.nics ? " on " : "",
	       a.nics ? a.nics : "", mib);
	fflush(stdout);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair", -errno);
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		exit(receiver(&a, sv[1], mib << 20));
	}
	close(sv[1]);
	int rc = sender(&a, sv[0], mib << 20);
	int status = 0;
	waitpid(pid, &status, 0);
	if (rc || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "xfer-demo: FAILED\n");
		return 1;
	}
	printf("xfer-demo: OK\n");
	return 0;
}
