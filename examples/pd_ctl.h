/* The demo's and benchmark's control plane: a TCP connection between the
 * prefill and decode processes, carrying engine addresses and small
 * figures, as a real deployment's scheduler or RPC layer would. */
#ifndef PD_CTL_H
#define PD_CTL_H

#include <stddef.h>
#include <stdint.h>

/* "host:port". Listens and accepts one connection / connects (retrying for
 * up to timeout_ms while the other side starts). Return a socket or -errno. */
int pd_ctl_accept(const char *hostport);
int pd_ctl_connect(const char *hostport, uint64_t timeout_ms);

int pd_ctl_send(int fd, const void *buf, size_t len);
/* Returns the length, -EPIPE when the peer closed, -EMSGSIZE past cap. */
long pd_ctl_recv(int fd, void *buf, size_t cap);
int pd_ctl_send_u64(int fd, uint64_t v);
int pd_ctl_recv_u64(int fd, uint64_t *v);

double pd_now(void);
void pd_die(const char *what, int err) __attribute__((noreturn));

#endif
