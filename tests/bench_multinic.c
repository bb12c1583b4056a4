/* xfer-bench-multinic: striping over two NICs against one, same run. Two
 * hosts (network namespaces) joined by two veth pairs, each capped with tbf
 * (default 1gbit); a 64 MiB single write (sharded) and a 10,000-page paged
 * write (pages split across the NICs) over 2 NICs vs over 1 NIC. Prints the
 * times, Gbit/s and the 2-vs-1 ratio (target >= 1.9x). Needs root.
 *   xfer-bench-multinic [RATE]  e.g. 1gbit */
#include <string.h>
#include <time.h>

#include <unistd.h>

#include "helpers.h"
#include "netns.h"

#define SINGLE (64u << 20)
#define PAGES 10000u
#define PAGE 4096u
#define REPS 3

static struct netns_pair net;
static int nics;
static double results[2][2]; /* [nics-1][single, paged] seconds, best of REPS */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static xfer_engine_t *engine_on(int host)
{
	netns_enter(&net, host);
	char list[64];
	netns_nic_list(&net, host, nics, list, sizeof(list));
	struct xfer_attr a;
	xfer_attr_init(&a);
	a.provider = "tcp";
	a.nics = list;
	return t_engine(&a);
}

static int sender(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	xfer_engine_t *e = engine_on(0);
	xfer_peer_t peer = t_connect(e, fd);
	uint8_t *src = malloc(SINGLE);
	CHECK(src);
	t_fill(src, SINGLE, 1);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, src, SINGLE, &mr));
	xfer_rmr_t *dst = t_recv_rmr(e, peer, fd);
	uint32_t *idxs = malloc(4 * PAGES);
	for (uint32_t i = 0; i < PAGES; i++)
		idxs[i] = i;
	double best[2] = {1e9, 1e9};
	for (int rep = 0; rep < REPS; rep++) {
		struct xfer_write w = {.src = mr, .dst = dst, .len = SINGLE, .flags = XFER_F_SHARD};
		double t0 = now_s();
		CHECK_OK(xfer_write(e, &w, NULL));
		CHECK_RC(t_wait_cqe(e, 120000).res, 0);
		double t = now_s() - t0;
		best[0] = t < best[0] ? t : best[0];
		struct xfer_paged_write pw = {.src = mr, .dst = dst, .page_len = PAGE, .src_pages = idxs,
					      .src_stride = PAGE, .dst_pages = idxs, .dst_stride = PAGE,
					      .npages = PAGES};
		t0 = now_s();
		CHECK_OK(xfer_write_paged(e, &pw, NULL));
		CHECK_RC(t_wait_cqe(e, 120000).res, 0);
		t = now_s() - t0;
		best[1] = t < best[1] ? t : best[1];
	}
	t_send_blob(fd, best, sizeof(best));
	xfer_rmr_free(dst);
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	free(src);
	free(idxs);
	return 0;
}

static int receiver(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	xfer_engine_t *e = engine_on(1);
	(void)t_connect(e, fd);
	uint8_t *dst = calloc(1, SINGLE);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, dst, SINGLE, &mr));
	t_send_desc(fd, mr);
	double best[2];
	t_recv_blob(fd, best, sizeof(best));
	/* Relay the figures to the parent, which started us. */
	FILE *f = fopen(arg ? (const char *)arg : "/dev/null", "wb");
	if (f) {
		fwrite(best, sizeof(best), 1, f);
		fclose(f);
	}
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	free(dst);
	return 0;
}

int main(int argc, char **argv)
{
	const char *rate = argc > 1 ? argv[1] : "1gbit";
	netns_create(&net, 2, rate);
	char path[64];
	snprintf(path, sizeof(path), "/tmp/xfer-multinic-%d", (int)getpid());
	for (nics = 1; nics <= 2; nics++) {
		CHECK(t_run_pair(sender, receiver, path) == 0);
		FILE *f = fopen(path, "rb");
		CHECK(f && fread(results[nics - 1], sizeof(results[0]), 1, f) == 1);
		fclose(f);
		unlink(path);
	}
	netns_destroy(&net);
	printf("two hosts, veths capped at %s each, tcp;ofi_rxm, best of %d\n", rate, REPS);
	printf("%-28s %10s %10s %10s %10s %7s\n", "op", "1 NIC s", "Gbit/s", "2 NICs s", "Gbit/s", "ratio");
	const char *names[2] = {"single write 64 MiB", "paged 10000 x 4 KiB"};
	const double bytes[2] = {SINGLE, (double)PAGES * PAGE};
	int ok = 1;
	for (int k = 0; k < 2; k++) {
		double r = results[0][k] / results[1][k];
		printf("%-28s %10.3f %10.2f %10.3f %10.2f %6.2fx %s\n", names[k], results[0][k],
		       bytes[k] * 8 / results[0][k] / 1e9, results[1][k], bytes[k] * 8 / results[1][k] / 1e9,
		       r, r >= 1.9 ? "PASS (>= 1.9x)" : "MISS (< 1.9x)");
		ok &= r >= 1.9;
	}
	return ok ? 0 : 3;
}
