/* Control socket: framing, bootstrap by listen/connect or socketpair. */
#include "bench_ctl.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct frame {
	uint32_t type, len;
};

/* Splits "[ADDR:]PORT" (ADDR may be [v6]); host NULL when absent. */
static int split_spec(const char *spec, char *host, size_t cap, const char **port)
{
	const char *colon = strrchr(spec, ':');
	host[0] = 0;
	if (!colon) {
		*port = spec;
		return 0;
	}
	size_t n = (size_t)(colon - spec);
	if (n && spec[0] == '[' && spec[n - 1] == ']') {
		spec++;
		n -= 2;
	}
	if (n >= cap)
		return -ENAMETOOLONG;
	memcpy(host, spec, n);
	host[n] = 0;
	*port = colon + 1;
	return 0;
}

static void tune(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int ctl_listen(const char *spec, struct ctl *c)
{
	char host[256];
	const char *port;
	int ret = split_spec(spec, host, sizeof(host), &port);
	if (ret)
		return ret;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE}, *res;
	if ((ret = getaddrinfo(host[0] ? host : NULL, port, &hints, &res)))
		return fprintf(stderr, "xfer-bench: %s: %s\n", spec, gai_strerror(ret)), -EINVAL;
	int lfd = -1;
	/* Prefer IPv4 for the wildcard so that "PORT" alone accepts 127.0.0.1. */
	for (int pass = 0; pass < 2 && lfd < 0; pass++) {
		for (struct addrinfo *a = res; a; a = a->ai_next) {
			if ((pass == 0) != (a->ai_family == AF_INET))
				continue;
			int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0), one = 1;
			if (fd < 0)
				continue;
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (!bind(fd, a->ai_addr, a->ai_addrlen) && !listen(fd, 1)) {
				lfd = fd;
				break;
			}
			close(fd);
		}
	}
	freeaddrinfo(res);
	if (lfd < 0)
		return -errno ? -errno : -EADDRNOTAVAIL;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ret = fd < 0 ? -errno : 0;
	close(lfd);
	if (ret)
		return ret;
	tune(fd);
	c->fd = fd;
	return 0;
}

int ctl_connect(const char *spec, struct ctl *c)
{
	char host[256];
	const char *port;
	int ret = split_spec(spec, host, sizeof(host), &port);
	if (ret)
		return ret;
	if (!host[0])
		return -EINVAL;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
	if ((ret = getaddrinfo(host, port, &hints, &res)))
		return fprintf(stderr, "xfer-bench: %s: %s\n", spec, gai_strerror(ret)), -EINVAL;
	/* The target may still be starting (or creating its engine): retry. */
	for (int attempt = 0; attempt < 100; attempt++) {
		for (struct addrinfo *a = res; a; a = a->ai_next) {
			int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
			if (fd < 0)
				continue;
			if (!connect(fd, a->ai_addr, a->ai_addrlen)) {
				freeaddrinfo(res);
				tune(fd);
				c->fd = fd;
				return 0;
			}
			ret = -errno;
			close(fd);
		}
		nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
	}
	freeaddrinfo(res);
	return ret ? ret : -ECONNREFUSED;
}

int ctl_pair(struct ctl *a, struct ctl *b)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	a->fd = sv[0];
	b->fd = sv[1];
	return 0;
}

void ctl_close(struct ctl *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *b = p;
	while (n) {
		ssize_t r = send(fd, b, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EPIPE;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n)
{
	char *b = p;
	while (n) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EPIPE;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

int ctl_send(struct ctl *c, uint32_t type, const void *p, uint32_t len)
{
	struct frame f = {type, len};
	int ret = write_all(c->fd, &f, sizeof(f));
	return ret ? ret : write_all(c->fd, p, len);
}

int ctl_recv(struct ctl *c, uint32_t *type, void *p, uint32_t cap, uint32_t *len, int timeout_ms)
{
	struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
	int r;
	while ((r = poll(&pfd, 1, timeout_ms)) < 0 && errno == EINTR)
		;
	if (r == 0)
		return -ETIMEDOUT;
	struct frame f;
	int ret = read_all(c->fd, &f, sizeof(f));
	if (ret)
		return ret;
	if (f.len > cap || f.len > CTL_MAX)
		return -EPROTO;
	if ((ret = read_all(c->fd, p, f.len)))
		return ret;
	*type = f.type;
	if (len)
		*len = f.len;
	return 0;
}

int ctl_expect(struct ctl *c, uint32_t type, void *p, uint32_t cap, uint32_t *len, int timeout_ms)
{
	uint32_t got;
	int ret = ctl_recv(c, &got, p, cap, len, timeout_ms);
	if (ret)
		return ret;
	return got == type ? 0 : -EPROTO;
}

int ctl_readable(struct ctl *c)
{
	struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
	return poll(&pfd, 1, 0) > 0;
}

/* ------------------------------------------------------------ case framing */

int case_finish(struct ctl *ctl, uint64_t calls, uint64_t imms, struct ctl_result *res)
{
	struct ctl_end end = {.calls = calls, .imms = imms};
	int ret = ctl_send(ctl, MSG_END, &end, sizeof(end));
	/* The target may count and verify hundreds of MiB before answering. */
	if (!ret)
		ret = ctl_expect(ctl, MSG_RESULT, res, sizeof(*res), NULL, 120000);
	if (ret)
		return ret;
	res->msg[sizeof(res->msg) - 1] = 0;
	if (res->status)
		fprintf(stderr, "xfer-bench: target: %s\n", res->msg[0] ? res->msg : "failed");
	return res->status;
}

int case_wait_end(struct ctl *ctl, struct ctl_end *end)
{
	return ctl_expect(ctl, MSG_END, end, sizeof(*end), NULL, -1);
}

int case_reply(struct ctl *ctl, int status, int verified, const char *msg)
{
	return case_reply_sleeps(ctl, status, verified, 0, msg);
}

int case_reply_sleeps(struct ctl *ctl, int status, int verified, uint64_t sleeps, const char *msg)
{
	struct ctl_result r = {.status = status, .verified = verified, .sleeps = sleeps};
	snprintf(r.msg, sizeof(r.msg), "%s", msg ? msg : "");
	return ctl_send(ctl, MSG_RESULT, &r, sizeof(r));
}
