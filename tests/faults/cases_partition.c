/* A network partition between two hosts (network namespaces): the target's
 * end of the link goes down, the engine declares the
 * target dead within its heartbeat allowance, everything pending to it
 * completes, the stable peer on the initiator's host keeps working; when the
 * link heals, the target is added again and a verified write goes through. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../netns.h"
#include "cases.h"

static struct netns_pair net;
static char nic_a[16], nic_b[16];

static int prepare(void)
{
	if (strcmp(t_provider(), "tcp") != 0) {
		fprintf(stderr, "SKIP: partitions need a network provider (tcp)\n");
		return T_SKIP;
	}
	netns_create(&net, 1, NULL);
	snprintf(nic_a, sizeof(nic_a), "%s", net.ifname[0][0]);
	snprintf(nic_b, sizeof(nic_b), "%s", net.ifname[1][0]);
	return 0;
}

/* The initiator and the stable peer live on host A, the target on host B. */
static void place(struct xfer_attr *a, int role)
{
	netns_enter(&net, role == 1 ? 1 : 0);
	a->provider = "tcp";
	a->nics = role == 1 ? nic_b : nic_a;
	if (role == 0) {
		a->heartbeat_ms = 100;
		a->heartbeat_misses = 10;
	}
}

/* The target's end of the link goes down (netem is not in every kernel). */
static void link_set(const char *state)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "ip -n %s link set %s %s", net.ns[1], nic_b, state);
	CHECK(system(cmd) == 0);
}

static int partition_init(struct fault_init *f)
{
	link_set("down");
	uint64_t start = mono_ns();
	enum { N = 8 };
	for (uint64_t i = 0; i < N; i++) {
		struct xfer_write w = {.src = f->src, .dst = f->t_rmr, .len = 65536, .imm = 1,
				       .flags = XFER_F_IMM};
		struct xfer_completion c = {.user_data = 800 + i, .timeout_ms = 4000};
		CHECK_OK(xfer_write(f->e, &w, &c));
	}
	int32_t res[N];
	reap_exactly(f->e, 800, N, res, 6000);
	for (int i = 0; i < N; i++)
		CHECK(res[i] != 0);
	fprintf(stderr, "partitioned writes failed (%s) within %llu ms\n", xfer_strerror(res[0]),
		(unsigned long long)ms_since(start));
	while (xfer_peer_state(f->e, f->t) != XFER_PEER_DEAD) {
		CHECK(ms_since(start) < 4000);
		usleep(10000);
	}
	fprintf(stderr, "target declared dead after %llu ms\n", (unsigned long long)ms_since(start));
	CHECK_RC(xfer_write_imm(f->e, f->t, 1, NULL), -XFER_EPEER);
	stable_check(f); /* same host, other peer: unaffected */

	/* Heal, then reach the same target again as a new peer. */
	link_set("up");
	uint8_t addr[XFER_ADDR_MAX], desc[XFER_DESC_MAX];
	t_send_u64(f->fd_t, 1);
	size_t alen = t_recv_blob(f->fd_t, addr, sizeof(addr));
	size_t dlen = t_recv_blob(f->fd_t, desc, sizeof(desc));
	xfer_peer_t again;
	CHECK_OK(xfer_peer_add(f->e, addr, alen, &again));
	xfer_rmr_t *r;
	CHECK_OK(xfer_rmr_import(f->e, again, desc, dlen, &r));
	int32_t ok = -1;
	for (int attempt = 0; attempt < 100 && ok != 0; attempt++) {
		struct xfer_write w = {.src = f->src, .src_off = 65536, .dst = r, .len = 4096, .imm = 2,
				       .flags = XFER_F_IMM};
		struct xfer_completion c = {.user_data = 900, .timeout_ms = 2000};
		CHECK_OK(xfer_write(f->e, &w, &c));
		reap_exactly(f->e, 900, 1, &ok, 5000);
		if (ok)
			usleep(100000);
	}
	CHECK_RC(ok, 0);
	fprintf(stderr, "healed: write verified after %llu ms\n", (unsigned long long)ms_since(start));
	CHECK(t_recv_u64(f->fd_t) == 2);
	xfer_rmr_free(r);
	return 0;
}

static int partition_target(struct fault_target *t)
{
	CHECK(t_recv_u64(t->fd) == 1);
	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(t->e, addr, sizeof(addr), NULL);
	t_send_blob(t->fd, addr, (size_t)alen);
	struct xfer_completion c = {.user_data = 2, .timeout_ms = 20000};
	CHECK_OK(xfer_expect_imm(t->e, 2, 1, &c));
	t_send_desc(t->fd, t->mr);
	CHECK_RC(t_wait_cqe(t->e, 25000).res, 0);
	uint8_t *want = malloc(65536 + 4096);
	CHECK(want);
	t_fill(want, 65536 + 4096, 1);
	CHECK(memcmp(t->buf + F_GUARD, want + 65536, 4096) == 0);
	free(want);
	t_send_u64(t->fd, 2);
	return 0;
}

const struct fault_case case_partition = {"network_partition", partition_init, partition_target,
					  place, prepare};
