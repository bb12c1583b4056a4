#include "pd_ctl.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "xfer.h"

double pd_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void pd_die(const char *what, int err)
{
	fprintf(stderr, "pd: %s: %s\n", what, xfer_strerror(err));
	exit(1);
}

static int resolve(const char *hostport, struct addrinfo **out, int passive)
{
	char host[256];
	const char *colon = strrchr(hostport, ':');
	if (!colon || (size_t)(colon - hostport) >= sizeof(host))
		return -EINVAL;
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = 0;
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				 .ai_flags = passive ? AI_PASSIVE : 0};
	return getaddrinfo(host, colon + 1, &hints, out) ? -EHOSTUNREACH : 0;
}

int pd_ctl_accept(const char *hostport)
{
	struct addrinfo *ai;
	int ret = resolve(hostport, &ai, 1);
	if (ret)
		return ret;
	int s = socket(ai->ai_family, SOCK_STREAM, 0), one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (s < 0 || bind(s, ai->ai_addr, ai->ai_addrlen) || listen(s, 1)) {
		ret = -errno;
		freeaddrinfo(ai);
		if (s >= 0)
			close(s);
		return ret;
	}
	freeaddrinfo(ai);
	int c = accept(s, NULL, NULL);
	ret = c < 0 ? -errno : c;
	close(s);
	return ret;
}

int pd_ctl_connect(const char *hostport, uint64_t timeout_ms)
{
	struct addrinfo *ai;
	int ret = resolve(hostport, &ai, 0);
	if (ret)
		return ret;
	double until = pd_now() + (double)timeout_ms / 1e3;
	for (;;) {
		int s = socket(ai->ai_family, SOCK_STREAM, 0);
		if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
			freeaddrinfo(ai);
			return s;
		}
		ret = -errno;
		if (s >= 0)
			close(s);
		if (pd_now() > until)
			break;
		usleep(50000); /* the other side may still be starting */
	}
	freeaddrinfo(ai);
	return ret;
}

static int all(int fd, void *buf, size_t len, int rd)
{
	char *p = buf;
	while (len) {
		ssize_t n = rd ? read(fd, p, len) : write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int pd_ctl_send_u64(int fd, uint64_t v)
{
	return all(fd, &v, sizeof(v), 0);
}

int pd_ctl_recv_u64(int fd, uint64_t *v)
{
	return all(fd, v, sizeof(*v), 1);
}

int pd_ctl_send(int fd, const void *buf, size_t len)
{
	int ret = pd_ctl_send_u64(fd, len);
	return ret ? ret : all(fd, (void *)buf, len, 0);
}

long pd_ctl_recv(int fd, void *buf, size_t cap)
{
	uint64_t len;
	int ret = pd_ctl_recv_u64(fd, &len);
	if (ret)
		return ret;
	if (len > cap)
		return -EMSGSIZE;
	ret = all(fd, buf, len, 1);
	return ret ? ret : (long)len;
}
