/* The C side of python/bench/overhead.py: the cost of one xfer_write() call
 * and of one xfer_write_paged() call of N pages, measured the way the Python
 * benchmark measures its own calls: a clock around each submission in
 * batches, completions reaped between batches (not timed); medians of the
 * steady-state calls and of the first call of each batch (cold).
 *
 * Two processes (fork), as in the Python benchmark: the child owns the
 * target region; the parent submits. Prints one JSON object on stdout.
 *
 *   xfer-overhead-c [--provider NAME] [--nics LIST] [--pages N] [--page-len B]
 *                   [--rounds R] [--batch B] [--paged-batch B]
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

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "xfer-overhead-c: %s: %s\n", what, xfer_strerror(rc));
	exit(1);
}

static void put(int fd, const void *b, size_t n)
{
	if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || write(fd, b, n) != (ssize_t)n)
		die("control socket", -EPIPE);
}

static size_t get(int fd, void *b, size_t cap)
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
	put(fd, addr, (size_t)len);
	size_t plen = get(fd, addr, sizeof(addr));
	if ((rc = xfer_peer_add(e, addr, plen, peer)))
		die("adding the peer", rc);
	return e;
}

static void reap(xfer_engine_t *e, int n)
{
	struct xfer_cqe c[256];
	while (n > 0) {
		int got = xfer_cq_wait(e, c, n < 256 ? n : 256, 60000);
		if (got < 0)
			die("waiting for completions", got);
		for (int i = 0; i < got; i++)
			if (c[i].res)
				die("an operation failed", c[i].res);
		n -= got;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int target(const struct xfer_attr *a, int fd, size_t bytes)
{
	xfer_peer_t peer;
	xfer_engine_t *e = open_engine(a, fd, &peer);
	void *buf = aligned_alloc(4096, bytes);
	memset(buf, 0, bytes);
	xfer_mr_t *mr;
	int rc = xfer_mr_reg(e, buf, bytes, &mr);
	if (rc)
		die("registering", rc);
	uint8_t d[XFER_DESC_MAX];
	int dl = xfer_mr_desc(mr, d, sizeof(d), NULL);
	put(fd, d, (size_t)dl);
	char done;
	if (read(fd, &done, 1) != 1)
		return 1;
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	struct xfer_attr a;
	xfer_attr_init(&a);
	uint32_t pages = 1000, page_len = 64, rounds = 40, batch = 256, pbatch = 32;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--provider") && i + 1 < argc)
			a.provider = argv[++i];
		else if (!strcmp(argv[i], "--nics") && i + 1 < argc)
			a.nics = argv[++i];
		else if (!strcmp(argv[i], "--pages") && i + 1 < argc)
			pages = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--page-len") && i + 1 < argc)
			page_len = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			batch = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--paged-batch") && i + 1 < argc)
			pbatch = (uint32_t)strtoul(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "usage: %s [--provider P] [--nics L] [--pages N] [--page-len B] "
					"[--rounds R] [--batch B] [--paged-batch B]\n", argv[0]);
			return 2;
		}
	}
	if (!rounds || !batch || !pbatch || !pages)
		return 2;
	size_t bytes = (size_t)pages * page_len;
	if (bytes < 4096)
		bytes = 4096;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair", -errno);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(target(&a, sv[1], bytes));
	}
	close(sv[1]);
	int fd = sv[0];
	xfer_peer_t peer;
	xfer_engine_t *e = open_engine(&a, fd, &peer);
	void *src = aligned_alloc(4096, bytes);
	memset(src, 7, bytes);
	xfer_mr_t *mr;
	int rc = xfer_mr_reg(e, src, bytes, &mr);
	if (rc)
		die("registering", rc);
	uint8_t d[XFER_DESC_MAX];
	size_t dl = get(fd, d, sizeof(d));
	xfer_rmr_t *dst;
	if ((rc = xfer_rmr_import(e, peer, d, dl, &dst)))
		die("importing", rc);
	uint32_t *idx = malloc(pages * sizeof(uint32_t));
	for (uint32_t i = 0; i < pages; i++)
		idx[i] = pages - 1 - i;

	/* Each call is clocked on its own. The first call of a batch comes right
	 * after the thread slept in xfer_cq_wait and runs cold; the others are
	 * the steady state. Both are reported, as medians. */
	uint32_t maxb = batch > pbatch ? batch : pbatch;
	uint64_t *hot_w = calloc((size_t)rounds * maxb, sizeof(uint64_t));
	uint64_t *hot_p = calloc((size_t)rounds * maxb, sizeof(uint64_t));
	uint64_t *cold_w = calloc(rounds, sizeof(uint64_t)), *cold_p = calloc(rounds, sizeof(uint64_t));
	size_t nhw = 0, nhp = 0;
	struct xfer_write w = {.src = mr, .dst = dst, .len = 64};
	struct xfer_paged_write pw = {.src = mr, .dst = dst, .page_len = page_len, .src_pages = idx,
				      .src_stride = page_len, .dst_pages = idx, .dst_stride = page_len,
				      .npages = pages};
	for (uint32_t warm = 0; warm < 2; warm++) { /* the first pass warms up */
		nhw = nhp = 0;
		for (uint32_t r = 0; r < rounds; r++) {
			for (uint32_t i = 0; i < batch; i++) {
				struct xfer_completion c = {.user_data = i};
				uint64_t t0 = now_ns();
				if ((rc = xfer_write(e, &w, &c)))
					die("xfer_write", rc);
				uint64_t dt = now_ns() - t0;
				if (i == 0)
					cold_w[r] = dt;
				else
					hot_w[nhw++] = dt;
			}
			reap(e, (int)batch);
		}
		for (uint32_t r = 0; r < rounds; r++) {
			for (uint32_t i = 0; i < pbatch; i++) {
				struct xfer_completion c = {.user_data = i};
				uint64_t t0 = now_ns();
				if ((rc = xfer_write_paged(e, &pw, &c)))
					die("xfer_write_paged", rc);
				uint64_t dt = now_ns() - t0;
				if (i == 0)
					cold_p[r] = dt;
				else
					hot_p[nhp++] = dt;
			}
			reap(e, (int)pbatch);
		}
	}
	qsort(hot_w, nhw, sizeof(uint64_t), cmp_u64);
	qsort(hot_p, nhp, sizeof(uint64_t), cmp_u64);
	qsort(cold_w, rounds, sizeof(uint64_t), cmp_u64);
	qsort(cold_p, rounds, sizeof(uint64_t), cmp_u64);
	printf("{\"provider\": \"%s\", \"write_ns\": %llu, \"write_cold_ns\": %llu, \"paged_ns\": %llu, "
	       "\"paged_cold_ns\": %llu, \"pages\": %u, \"page_len\": %u}\n",
	       xfer_engine_provider(e), (unsigned long long)(nhw ? hot_w[nhw / 2] : 0),
	       (unsigned long long)cold_w[rounds / 2], (unsigned long long)(nhp ? hot_p[nhp / 2] : 0),
	       (unsigned long long)cold_p[rounds / 2], pages, page_len);
	if (write(fd, "q", 1) != 1)
		die("control socket", -EPIPE);
	int status = 0;
	waitpid(pid, &status, 0);
	xfer_rmr_free(dst);
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	free(src);
	free(idx);
	free(hot_w);
	free(hot_p);
	free(cold_w);
	free(cold_p);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
