/* Setting a connection up: a NIC listens on an abstract unix socket named
 * in its address; an initiator connects at av_insert, checks the listener's
 * uid (SO_PEERCRED, kernel-verified), creates the pair's segment as a sealed
 * memfd and passes it with its hello. The target checks the initiator's
 * uid, maps the segment, probes whether it may pull from the initiator with
 * process_vm_readv, and acks. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#include "backend/sm/sm.h"
#include "xfer.h"

uint64_t xi_sm_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static socklen_t sock_addr(const struct sm_addr *a, struct sockaddr_un *sa)
{
	char name[SM_SOCK_NAME_LEN + 1];
	xi_sm_sock_name(a, name);
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	/* Abstract namespace: a leading NUL, no file, gone with the socket. */
	memcpy(sa->sun_path + 1, name, SM_SOCK_NAME_LEN);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + SM_SOCK_NAME_LEN);
}

static void fill_random(void *buf, size_t len)
{
	if (getrandom(buf, len, 0) != (ssize_t)len) {
		uint64_t x = xi_sm_now_ns() ^ ((uint64_t)getpid() << 32);
		for (size_t i = 0; i < len; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			((uint8_t *)buf)[i] = (uint8_t)(x >> 56);
		}
	}
}

int xi_sm_listen(struct sm_nic *s)
{
	s->ep = epoll_create1(EPOLL_CLOEXEC);
	if (s->ep < 0)
		return -errno;
	s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->lfd < 0)
		return -errno;
	for (int attempt = 0;; attempt++) {
		struct sockaddr_un sa;
		fill_random(s->addr.name, sizeof(s->addr.name));
		socklen_t len = sock_addr(&s->addr, &sa);
		if (bind(s->lfd, (struct sockaddr *)&sa, len) == 0)
			break;
		if (errno != EADDRINUSE || attempt == 8)
			return -errno;
	}
	if (listen(s->lfd, SOMAXCONN))
		return -errno;
	return xi_sm_epoll_add(s, s->lfd, s);
}

static int peer_cred(int fd, struct ucred *cr)
{
	socklen_t len = sizeof(*cr);
	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &len) ? -errno : 0;
}

static void map_parts(struct sm_conn *c, void *base)
{
	c->seg = base;
	c->reqs = (struct sm_req *)((uint8_t *)base + SM_OFF_REQS);
	c->cmps = (struct sm_cmp *)((uint8_t *)base + SM_OFF_CMPS);
	c->data = (uint8_t *)base + SM_OFF_DATA;
}

/* A memfd holding a fresh segment, sealed so that the target, which maps it
 * too, can never be made to fault by our shrinking it. */
static int make_segment(struct sm_conn *c, int *fd_out, uint64_t *nonce)
{
	int fd = memfd_create("xfer-sm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	void *base = MAP_FAILED;
	if (ftruncate(fd, (off_t)SM_SEG_BYTES) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) ||
	    (base = mmap(NULL, SM_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		int err = -errno;
		close(fd);
		return err;
	}
	map_parts(c, base);
	fill_random(nonce, sizeof(*nonce));
	c->seg->magic = SM_SEG_MAGIC;
	c->seg->version = SM_VERSION;
	c->seg->slots = SM_SLOTS;
	c->seg->inline_bytes = SM_INLINE;
	c->seg->nonce = *nonce;
	*fd_out = fd;
	return 0;
}

static int send_with_fd(int sock, const void *msg, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	memset(&u, 0, sizeof(u));
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)len ? 0 : -errno;
}

/* Connects to a listener; a full backlog (the peer's worker has not
 * accepted yet) is waited out for a while: this is the control path. */
static int connect_to(int fd, const struct sm_addr *a)
{
	struct sockaddr_un sa;
	socklen_t len = sock_addr(a, &sa);
	for (int tries = 0;; tries++) {
		if (connect(fd, (struct sockaddr *)&sa, len) == 0)
			return 0;
		if (errno != EAGAIN || tries == 2000)
			break;
		usleep(500);
	}
	/* ENOENT-like answers of an abstract name: nobody listens there (a dead
	 * peer, or one in another network namespace). */
	return errno == ENOENT ? -ECONNREFUSED : -errno;
}

static int free_handle(struct sm_nic *s, uint32_t *out)
{
	for (uint32_t i = 0; i < SM_MAX_CONNS; i++)
		if (!s->handles[i]) {
			*out = i;
			return 0;
		}
	return -ENOSPC;
}

int xi_sm_connect(struct sm_nic *s, const struct sm_addr *a, struct sm_conn **out)
{
	uint32_t h;
	if (s->nini + s->ntgt >= SM_MAX_CONNS || free_handle(s, &h))
		return -ENOSPC;
	struct sm_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->slots = calloc(SM_SLOTS, sizeof(*c->slots));
	c->nic = s;
	c->role = SM_INITIATOR;
	c->fd = -1;
	int memfd = -1, ret = c->slots ? 0 : -ENOMEM;
	struct ucred cr;
	uint64_t nonce = 0;
	if (!ret)
		c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (!ret && c->fd < 0)
		ret = -errno;
	if (!ret)
		ret = connect_to(c->fd, a);
	if (!ret)
		ret = peer_cred(c->fd, &cr);
	if (!ret && cr.uid != s->uid) {
		xwarn("shm: refusing a peer of uid %u (we are %u)", (unsigned)cr.uid, (unsigned)s->uid);
		ret = -EACCES;
	}
	if (!ret)
		ret = make_segment(c, &memfd, &nonce);
	if (!ret) {
		c->pid = cr.pid;
		struct sm_hello hello = {.flags = s->cma_allowed ? 0 : SM_HELLO_NO_CMA, .slots = SM_SLOTS,
					 .inline_bytes = SM_INLINE, .seg_bytes = SM_SEG_BYTES,
					 .probe_addr = (uint64_t)(uintptr_t)c->seg, .nonce = nonce};
		uint8_t msg[SM_HELLO_BYTES];
		xi_sm_hello_encode(&hello, msg, sizeof(msg));
		ret = send_with_fd(c->fd, msg, sizeof(msg), memfd);
	}
	if (memfd >= 0)
		close(memfd); /* the target holds its own reference once the hello is queued */
	if (!ret)
		ret = xi_sm_epoll_add(s, c->fd, c);
	if (ret) {
		xi_sm_close_socket(c);
		xi_sm_conn_unmap(c);
		free(c->slots);
		free(c);
		return ret;
	}
	c->state = SM_CONNECTING;
	c->since_ns = xi_sm_now_ns();
	c->handle = h;
	s->handles[h] = c;
	xi_sm_list_add(s->ini, &s->nini, c);
	s->nconnecting++;
	s->nacks++;
	*out = c;
	return 0;
}

/* ------------------------------------------------------------ target side */

static void send_ack(struct sm_conn *c, int status, bool cma)
{
	struct sm_ack ack = {.flags = cma ? SM_ACK_CMA : 0, .status = status};
	uint8_t msg[SM_ACK_BYTES];
	xi_sm_ack_encode(&ack, msg, sizeof(msg));
	if (send(c->fd, msg, sizeof(msg), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(msg))
		xdbg("shm: ack to pid %d not sent: %s", (int)c->pid, strerror(errno));
}

void xi_sm_accept_all(struct sm_nic *s)
{
	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				xwarn("shm: accept failed: %s", strerror(errno));
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;
		}
		struct ucred cr;
		struct sm_conn *c = NULL;
		if (peer_cred(fd, &cr) || cr.uid != s->uid) {
			xwarn("shm: refusing a connection from another user");
		} else if (s->nini + s->ntgt >= SM_MAX_CONNS) {
			xwarn("shm: refusing a connection: %u connections already", SM_MAX_CONNS);
		} else if ((c = calloc(1, sizeof(*c))) && (c->defers = calloc(SM_SLOTS, sizeof(*c->defers)))) {
			c->nic = s;
			c->role = SM_TARGET;
			c->state = SM_CONNECTING;
			c->fd = fd;
			c->pid = cr.pid;
			c->since_ns = xi_sm_now_ns();
			if (xi_sm_epoll_add(s, fd, c) == 0) {
				xi_sm_list_add(s->tgt, &s->ntgt, c);
				s->nconnecting++;
				continue;
			}
		}
		if (c)
			free(c->defers);
		free(c);
		close(fd);
	}
}

/* Whether we may pull from the initiator: read the nonce of its mapping of
 * the segment through process_vm_readv and compare with ours. 1: yes; 0:
 * the kernel does not let us (payloads are then staged); -ESRCH: the
 * initiator is gone; -EPROTO: its mapping is not where it said (it is
 * already gone from the connection, or lies). */
static int probe_cma(struct sm_conn *c, const struct sm_hello *h)
{
	uint64_t got = 0;
	struct iovec l = {.iov_base = &got, .iov_len = sizeof(got)};
	struct iovec r = {.iov_base = (void *)(uintptr_t)(h->probe_addr + offsetof(struct sm_seg_hdr, nonce)),
			  .iov_len = sizeof(got)};
	if (h->probe_addr > UINT64_MAX - 4096)
		return -EPROTO;
	ssize_t n = process_vm_readv(c->pid, &l, 1, &r, 1, 0);
	if (n == (ssize_t)sizeof(got))
		return got == h->nonce ? 1 : -EPROTO;
	if (n < 0 && (errno == ESRCH || errno == EFAULT))
		return errno == ESRCH ? -ESRCH : -EPROTO;
	if (!c->nic->cma_logged) {
		c->nic->cma_logged = true;
		xwarn("shm: cannot read peer pid %d with process_vm_readv (%s); payloads over %u bytes are "
		      "staged through shared memory, which is slower (ptrace restrictions? see "
		      "docs/config.md)",
		      (int)c->pid, n < 0 ? strerror(errno) : "short read", SM_INLINE);
	}
	return 0;
}

static int take_segment(struct sm_conn *c, const struct sm_hello *h, int fd)
{
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != SM_SEG_BYTES)
		return -EPROTO;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPROTO; /* it could be shrunk under us: SIGBUS */
	void *base = mmap(NULL, SM_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	map_parts(c, base);
	const struct sm_seg_hdr *g = c->seg;
	if (g->magic != SM_SEG_MAGIC || g->version != SM_VERSION || g->slots != SM_SLOTS ||
	    g->inline_bytes != SM_INLINE || g->nonce != h->nonce) {
		xi_sm_conn_unmap(c);
		return -EPROTO;
	}
	/* Requests may be waiting already (small ones are posted before the
	 * ack); completions are ours to write, so there are none yet. */
	c->pos = 0;
	c->cmp_tail = 0;
	if (atomic_load_explicit(&c->seg->cmp_tail, memory_order_relaxed) != 0) {
		xi_sm_conn_unmap(c);
		return -EPROTO;
	}
	return 0;
}

bool xi_sm_on_hello(struct sm_conn *c, const uint8_t *msg, size_t len, const int *fds, int nfds)
{
	struct sm_hello h;
	int ret = xi_sm_hello_decode(msg, len, &h);
	if (ret == -XFER_EVERSION)
		ret = -EPROTONOSUPPORT;
	else if (ret || nfds != 1)
		ret = -EPROTO;
	if (!ret)
		ret = take_segment(c, &h, fds[0]);
	int cma = 0;
	if (!ret && !(h.flags & SM_HELLO_NO_CMA) && c->nic->cma_allowed)
		cma = probe_cma(c, &h);
	if (cma == -ESRCH)
		ret = -ECONNRESET; /* it died right after connecting */
	else if (cma < 0)
		ret = cma;
	if (ret) {
		/* An initiator that died or left right after connecting is no news. */
		xlog(ret == -ECONNRESET || cma < 0 ? XFER_LOG_INFO : XFER_LOG_WARN,
		     "shm: refusing a connection from pid %d: %s", (int)c->pid, strerror(-ret));
		send_ack(c, ret, false);
		xi_sm_conn_drop(c);
		return false;
	}
	c->cma = cma == 1;
	send_ack(c, 0, c->cma);
	c->state = SM_READY;
	c->nic->nconnecting--;
	xdbg("shm: connection from pid %d ready (%s)", (int)c->pid, c->cma ? "CMA" : "staged");
	return true;
}

/* --------------------------------------------------------- initiator side */

bool xi_sm_on_ack(struct sm_conn *c, const uint8_t *msg, size_t len)
{
	struct sm_ack a;
	if (xi_sm_ack_decode(msg, len, &a)) {
		xi_sm_conn_break(c, -EPROTO);
		return false;
	}
	if (a.status) {
		xwarn("shm: peer pid %d refused the connection: %s", (int)c->pid, strerror(-a.status));
		xi_sm_conn_break(c, a.status);
		return false;
	}
	c->cma = a.flags & SM_ACK_CMA;
	c->state = SM_READY;
	c->nic->nconnecting--;
	c->nic->nacks--;
	return true;
}
