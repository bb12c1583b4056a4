/* The sender check lets honest traffic through in the order applications
 * use: a client adds the server and sends first (the server does not know
 * it yet: a stranger, delivered), the server adds the client from that
 * message's address and answers, and the client's later messages, on the
 * connection opened before the server added it, pass the check. Nothing is
 * refused anywhere (xfer_stats.msgs_refused stays 0). With heartbeats on,
 * so that PINGs and PONGs go through the check too. */
#include <string.h>
#include <unistd.h>

#include "helpers.h"

static void attr(struct xfer_attr *a)
{
	t_attr(a);
	a->heartbeat_ms = 50;
	a->heartbeat_misses = 20;
}

static void send_ok(xfer_engine_t *e, xfer_peer_t p, const void *buf, size_t len)
{
	struct xfer_completion c = {.user_data = 1, .timeout_ms = 5000};
	CHECK_OK(xfer_send(e, p, buf, len, &c));
	CHECK_RC(t_wait_cqe(e, 8000).res, 0);
}

static void refused_none(xfer_engine_t *e)
{
	struct xfer_stats st;
	xfer_engine_stats(e, &st);
	CHECK(st.msgs_refused == 0);
}

static int server(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	attr(&a);
	xfer_engine_t *e = t_engine(&a);
	uint8_t mine[XFER_ADDR_MAX], msg[XFER_ADDR_MAX + 16];
	int alen = xfer_engine_addr(e, mine, sizeof(mine), NULL);
	CHECK(alen > 0);
	t_send_blob(fd, mine, (size_t)alen);
	/* The client's first message carries its address. */
	struct xfer_msg_info info;
	CHECK(xfer_recv_wait(e, msg, sizeof(msg), &info, 5000) == 1);
	xfer_peer_t p;
	CHECK_OK(xfer_peer_add(e, msg, info.len, &p));
	CHECK(info.src_id == xfer_peer_id(e, p));
	send_ok(e, p, "welcome", 8);
	for (int i = 0; i < 10; i++) {
		CHECK(xfer_recv_wait(e, msg, sizeof(msg), &info, 5000) == 1);
		CHECK(info.src_id == xfer_peer_id(e, p) && !strcmp((char *)msg, "again"));
	}
	usleep(500 * 1000); /* heartbeats both ways */
	CHECK(xfer_peer_state(e, p) == XFER_PEER_LIVE);
	refused_none(e);
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 1);
	xfer_engine_destroy(e);
	return 0;
}

static int client(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	struct xfer_attr a;
	attr(&a);
	xfer_engine_t *e = t_engine(&a);
	uint8_t theirs[XFER_ADDR_MAX], mine[XFER_ADDR_MAX], msg[16];
	size_t tlen = t_recv_blob(fds[0], theirs, sizeof(theirs));
	xfer_peer_t p;
	CHECK_OK(xfer_peer_add(e, theirs, tlen, &p));
	int alen = xfer_engine_addr(e, mine, sizeof(mine), NULL);
	CHECK(alen > 0);
	send_ok(e, p, mine, (size_t)alen);
	struct xfer_msg_info info;
	CHECK(xfer_recv_wait(e, msg, sizeof(msg), &info, 5000) == 1);
	CHECK(info.src_id == xfer_peer_id(e, p) && !strcmp((char *)msg, "welcome"));
	for (int i = 0; i < 10; i++)
		send_ok(e, p, "again", 6);
	CHECK(t_recv_u64(fds[0]) == 1);
	CHECK(xfer_peer_state(e, p) == XFER_PEER_LIVE);
	refused_none(e);
	t_send_u64(fds[0], 1);
	xfer_engine_destroy(e);
	return 0;
}

static int server_child(int idx, int fd, void *arg)
{
	return server(idx, fd, arg);
}

int main(void)
{
	return t_run_procs(1, server_child, client, NULL);
}
