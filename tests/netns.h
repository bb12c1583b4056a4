/* Real test hosts: two network namespaces joined by N veth pairs (N NICs per
 * host), made and removed by the test itself. Needs root and iproute2; tests
 * skip (exit 77) without them. */
#ifndef XFER_TEST_NETNS_H
#define XFER_TEST_NETNS_H

#include <stddef.h>
#include <stdint.h>

struct netns_pair {
	char ns[2][32];      /* host A, host B */
	char ifname[2][4][16]; /* [host][pair] */
	char addr[2][4][24];   /* [host][pair] IPv4 address */
	int pairs;
};

/* Creates the hosts; rate ("1gbit") caps every veth with tbf when non-NULL.
 * Registers removal at exit. Exits 77 when it cannot be done here. */
void netns_create(struct netns_pair *n, int pairs, const char *rate);
void netns_destroy(struct netns_pair *n);
/* Moves the calling process (before it creates engines) into host h. */
void netns_enter(const struct netns_pair *n, int host);
/* Bytes sent by an interface of the host the caller is in (/proc/net/dev). */
uint64_t netns_tx_bytes(const char *ifname);
/* "xa0,xa1" for the first k NICs of host h. */
void netns_nic_list(const struct netns_pair *n, int host, int k, char *out, size_t cap);

#endif
