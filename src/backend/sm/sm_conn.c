/* A connection's life after setup: the events of its socket (wake-up
 * bytes, the end of file that is a peer's death or departure), breaking and
 * dropping it, and the wake-ups we owe consumers that went to sleep. A
 * peer's death is its socket's hangup, seen at once by epoll: no lock, no
 * timeout needed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/log.h"
#include "backend/sm/sm.h"

int xi_sm_epoll_add(struct sm_nic *s, int fd, void *ptr)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = ptr};
	return epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

void xi_sm_list_add(struct sm_conn **list, uint32_t *n, struct sm_conn *c)
{
	c->list_idx = *n;
	list[(*n)++] = c;
}

static void list_del(struct sm_conn **list, uint32_t *n, struct sm_conn *c)
{
	struct sm_conn *last = list[--*n];
	list[c->list_idx] = last;
	last->list_idx = c->list_idx;
}

static void unkick(struct sm_conn *c)
{
	struct sm_nic *s = c->nic;
	if (!c->kick)
		return;
	for (uint32_t i = 0; i < s->nkicks; i++)
		if (s->kicks[i] == c) {
			s->kicks[i] = s->kicks[--s->nkicks];
			break;
		}
	c->kick = false;
}

void xi_sm_close_socket(struct sm_conn *c)
{
	if (c->fd < 0)
		return;
	epoll_ctl(c->nic->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
}

void xi_sm_conn_unmap(struct sm_conn *c)
{
	unkick(c);
	if (c->seg)
		munmap(c->seg, SM_SEG_BYTES);
	c->seg = NULL;
	c->reqs = NULL;
	c->cmps = NULL;
	c->data = NULL;
}

void xi_sm_conn_break(struct sm_conn *c, int status)
{
	struct sm_nic *s = c->nic;
	if (c->state == SM_BROKEN)
		return;
	if (c->state == SM_CONNECTING) {
		s->nconnecting--;
		s->nacks--;
	}
	if (!c->removed)
		xinfo("shm: connection to pid %d lost: %s", (int)c->pid, strerror(-status));
	c->state = SM_BROKEN;
	c->fail = status;
	xi_sm_close_socket(c);
	/* The segment stays mapped until the sweep has taken the completions
	 * the peer wrote before it went. */
	xi_sm_conn_sweep_later(c);
}

void xi_sm_conn_sweep_later(struct sm_conn *c)
{
	if (!c->sweep) {
		c->sweep = true;
		c->nic->sweeps[c->nic->nsweeps++] = c;
	}
}

void xi_sm_conn_free(struct sm_conn *c)
{
	struct sm_nic *s = c->nic;
	xi_sm_close_socket(c);
	xi_sm_conn_unmap(c);
	if (s->handles[c->handle] == c) {
		s->handles[c->handle] = NULL;
		s->gen[c->handle]++;
	}
	list_del(s->ini, &s->nini, c);
	free(c->slots);
	free(c);
}

void xi_sm_conn_drop(struct sm_conn *c)
{
	struct sm_nic *s = c->nic;
	if (c->state == SM_CONNECTING)
		s->nconnecting--;
	/* Its waiting SENDs are forgotten; a receive buffer it held goes back. */
	xi_sm_forget_defers(c);
	xi_sm_close_socket(c);
	xi_sm_conn_unmap(c);
	list_del(s->tgt, &s->ntgt, c);
	free(c->defers);
	free(c);
}

/* ---------------------------------------------------------------- events */

#define MAX_FDS 4

/* Reads every message queued on c. Returns false when c is gone. */
static bool drain(struct sm_conn *c)
{
	for (;;) {
		uint8_t msg[64];
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
		} u;
		struct iovec iov = {.iov_base = msg, .iov_len = sizeof(msg)};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
				    .msg_controllen = sizeof(u.buf)};
		ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return true;
		int fds[MAX_FDS], nfds = 0;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); n >= 0 && cm; cm = CMSG_NXTHDR(&mh, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				if (nfds < MAX_FDS)
					fds[nfds++] = fd;
				else
					close(fd);
			}
		}
		bool alive = n > 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)), keep = true;
		if (alive && c->state == SM_CONNECTING) {
			if (c->role == SM_TARGET)
				keep = xi_sm_on_hello(c, msg, (size_t)n, fds, nfds);
			else if (nfds == 0)
				keep = xi_sm_on_ack(c, msg, (size_t)n);
			else
				xi_sm_conn_break(c, -EPROTO), keep = false;
		} else if (alive && (n != 1 || nfds)) {
			alive = false; /* after setup only wake-up bytes travel here */
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		if (!keep)
			return false; /* refused during setup: dropped or broken */
		if (!alive) {
			/* End of file: the peer closed or died. */
			if (c->role == SM_TARGET)
				xi_sm_conn_drop(c);
			else
				xi_sm_conn_break(c, n < 0 ? -errno : n == 0 ? -ECONNRESET : -EPROTO);
			return false;
		}
	}
}

static void expire_connecting(struct sm_nic *s, uint64_t now)
{
	for (uint32_t i = 0; i < s->nini; i++) {
		struct sm_conn *c = s->ini[i];
		if (c->state == SM_CONNECTING && now - c->since_ns > SM_CONNECT_NS)
			xi_sm_conn_break(c, -ETIMEDOUT);
	}
	for (uint32_t i = 0; i < s->ntgt;) {
		struct sm_conn *c = s->tgt[i];
		if (c->state == SM_CONNECTING && now - c->since_ns > SM_CONNECT_NS)
			xi_sm_conn_drop(c); /* the last moved into i */
		else
			i++;
	}
}

void xi_sm_control(struct sm_nic *s)
{
	struct epoll_event evs[64];
	int n;
	do {
		n = epoll_wait(s->ep, evs, 64, 0);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == s) {
				xi_sm_accept_all(s);
				continue;
			}
			struct sm_conn *c = evs[i].data.ptr;
			/* Hangup comes with the last bytes readable: read them first
			 * (an ack, wake-ups), then the end of file. */
			if (!drain(c))
				continue;
			if (evs[i].events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
				if (c->role == SM_TARGET)
					xi_sm_conn_drop(c);
				else
					xi_sm_conn_break(c, -ECONNRESET);
			}
		}
	} while (n == 64);
	if (s->nconnecting)
		expire_connecting(s, xi_sm_now_ns());
}

void xi_sm_close_all(struct sm_nic *s)
{
	while (s->ntgt)
		xi_sm_conn_drop(s->tgt[s->ntgt - 1]);
	while (s->nini)
		xi_sm_conn_free(s->ini[s->nini - 1]);
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->ep >= 0)
		close(s->ep);
	s->lfd = s->ep = -1;
}

/* ---------------------------------------------------------------- wake-ups */

void xi_sm_wake(struct sm_conn *c)
{
	if (c->fd >= 0)
		(void)send(c->fd, "w", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void xi_sm_kick(struct sm_conn *c)
{
	if (!c->kick) {
		c->kick = true;
		c->nic->kicks[c->nic->nkicks++] = c;
	}
}

void xi_sm_flush_kicks(struct sm_nic *s)
{
	if (!s->nkicks)
		return;
	/* Pairs with the fence in trywait: either the consumer sees what we
	 * published or we see its flag (Dekker), so a sleeper is always woken. */
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t i = 0; i < s->nkicks; i++) {
		struct sm_conn *c = s->kicks[i];
		c->kick = false;
		if (!c->seg)
			continue;
		_Atomic uint32_t *flag = c->role == SM_INITIATOR ? &c->seg->req_sleeping : &c->seg->cmp_sleeping;
		if (atomic_load_explicit(flag, memory_order_relaxed) &&
		    atomic_exchange_explicit(flag, 0, memory_order_relaxed))
			xi_sm_wake(c);
	}
	s->nkicks = 0;
}
