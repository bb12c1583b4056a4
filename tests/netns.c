#include "netns.h"

#include <fcntl.h>
#include <stdarg.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

static struct netns_pair *to_clean;
static pid_t owner;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

void netns_destroy(struct netns_pair *n)
{
	for (int h = 0; h < 2; h++)
		if (n->ns[h][0])
			sh("ip netns del %s 2>/dev/null", n->ns[h]);
	n->ns[0][0] = n->ns[1][0] = 0;
}

static void cleanup(void)
{
	if (to_clean && getpid() == owner)
		netns_destroy(to_clean);
}

void netns_create(struct netns_pair *n, int pairs, const char *rate)
{
	if (geteuid() != 0 || sh("command -v ip >/dev/null 2>&1") != 0) {
		fprintf(stderr, "SKIP: network namespaces need root and iproute2\n");
		exit(T_SKIP);
	}
	memset(n, 0, sizeof(*n));
	n->pairs = pairs;
	int id = (int)getpid();
	for (int h = 0; h < 2; h++)
		snprintf(n->ns[h], sizeof(n->ns[h]), "xfer%c%d", h ? 'B' : 'A', id);
	to_clean = n;
	owner = getpid();
	atexit(cleanup);
	if (sh("ip netns add %s && ip netns add %s", n->ns[0], n->ns[1]) != 0) {
		fprintf(stderr, "SKIP: cannot create network namespaces here\n");
		netns_destroy(n);
		exit(T_SKIP);
	}
	for (int h = 0; h < 2; h++)
		CHECK(sh("ip -n %s link set lo up", n->ns[h]) == 0);
	for (int p = 0; p < pairs; p++) {
		for (int h = 0; h < 2; h++) {
			snprintf(n->ifname[h][p], sizeof(n->ifname[h][p]), "x%c%d", h ? 'b' : 'a', p);
			/* 10.231.P.{1,2}/24 exists only inside these namespaces. */
			snprintf(n->addr[h][p], sizeof(n->addr[h][p]), "10.231.%d.%d", p, h + 1);
		}
		CHECK(sh("ip link add %s netns %s type veth peer name %s netns %s", n->ifname[0][p],
			 n->ns[0], n->ifname[1][p], n->ns[1]) == 0);
		for (int h = 0; h < 2; h++) {
			CHECK(sh("ip -n %s addr add %s/24 dev %s && ip -n %s link set %s up", n->ns[h],
				 n->addr[h][p], n->ifname[h][p], n->ns[h], n->ifname[h][p]) == 0);
			if (rate)
				CHECK(sh("ip netns exec %s tc qdisc add dev %s root tbf rate %s burst 256kb "
					 "latency 50ms",
					 n->ns[h], n->ifname[h][p], rate) == 0);
		}
	}
	/* Providers list only interfaces that are running: wait for carrier. */
	for (int p = 0; p < pairs; p++)
		for (int h = 0; h < 2; h++) {
			int up = 0;
			for (int tries = 0; tries < 100 && !up; tries++) {
				up = sh("ip -n %s -o link show dev %s | grep -q 'state UP'", n->ns[h],
					n->ifname[h][p]) == 0;
				if (!up)
					usleep(50000);
			}
			CHECK(up);
		}
}

void netns_enter(const struct netns_pair *n, int host)
{
	char path[64];
	snprintf(path, sizeof(path), "/run/netns/%s", n->ns[host]);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(setns(fd, CLONE_NEWNET) == 0);
	close(fd);
}

uint64_t netns_tx_bytes(const char *ifname)
{
	FILE *f = fopen("/proc/net/dev", "r");
	char line[512];
	uint64_t tx = 0;
	CHECK(f);
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = 0;
		char *name = line;
		while (*name == ' ')
			name++;
		if (strcmp(name, ifname))
			continue;
		unsigned long long v[16] = {0};
		if (sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
			   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9)
			tx = v[8];
	}
	fclose(f);
	return tx;
}

void netns_nic_list(const struct netns_pair *n, int host, int k, char *out, size_t cap)
{
	out[0] = 0;
	for (int p = 0; p < k; p++) {
		size_t len = strlen(out);
		snprintf(out + len, cap - len, "%s%s", p ? "," : "", n->ifname[host][p]);
	}
}
