/* The raw RDMA backend's connection handshake (src/backend/ibv/ibv_link.c)
 * as a state machine between two sides over a simulated datagram network
 * that drops, duplicates, delays and reorders. For thousands of seeds:
 *   - both sides become ready, with each side's QPs connected to the
 *     other's current generation, simultaneous starts included;
 *   - a side never becomes ready while the peer's QPs are not connected to
 *     its current generation (no data into a QP pair that is not there);
 *   - after a QP failure on one side, or on both at once, or a stale
 *     retransmission from an earlier generation, they meet again at new
 *     generations.
 * No device is needed: the queue-pair transitions are the actions. */
#include <stdbool.h>
#include <string.h>

#include "backend/ibv/ibv_link.h"
#include "helpers.h"

#define NET_MAX 64

struct side {
	struct ibv_link l;
	bool qps_fresh; /* our QPs are in INIT (not connected, not in error) */
	int ready_events;
};

struct msg {
	int to;
	struct ibv_hello h;
};

static struct side s[2];
static struct msg net[NET_MAX];
static int nnet;
static uint64_t rng;
static bool lossy = true;

static unsigned rnd(unsigned n)
{
	return (unsigned)(t_rand(&rng) % n);
}

static void send_hello(int from)
{
	if (nnet == NET_MAX)
		return; /* the network drops it */
	struct msg *m = &net[nnet++];
	memset(m, 0, sizeof(*m));
	m->to = 1 - from;
	xi_ibv_link_hello_fields(&s[from].l, &m->h);
	m->h.qpn[0] = 100 + (uint32_t)from; /* the QPNs carry the sender's epoch, for the checks */
	m->h.psn[0] = s[from].l.epoch;
}

/* Performs the actions as the backend would. */
static void act(int i, int a)
{
	struct side *me = &s[i], *peer = &s[1 - i];
	if (a & LINK_RESET) {
		CHECK(!me->l.connected && me->l.draining);
		me->qps_fresh = false;
	}
	if (a & LINK_CONNECT) {
		CHECK(me->qps_fresh); /* only fresh QPs can be pointed at a peer */
		CHECK(me->l.connected && me->l.peer_psn[0] == me->l.r_epoch);
		me->qps_fresh = false;
	}
	if (a & LINK_READY) {
		/* The peer acknowledged our generation: its QPs point at ours. */
		CHECK(link_ready(&me->l));
		CHECK(peer->l.r_epoch == me->l.epoch);
		CHECK(peer->l.connected || peer->l.draining);
		me->ready_events++;
	}
	if (a & LINK_REPLY)
		send_hello(i);
}

static void deliver(int k)
{
	struct msg m = net[k];
	nnet--;
	net[k] = net[nnet];
	/* Sometimes the network duplicates. */
	if (lossy && rnd(10) == 0 && nnet < NET_MAX)
		net[nnet++] = m;
	act(m.to, xi_ibv_link_on_hello(&s[m.to].l, &m.h));
}

static void fail(int i)
{
	act(i, xi_ibv_link_fail(&s[i].l));
}

/* One random event: deliver, drop, retry timer, or a drain finishing. */
static void step(void)
{
	unsigned e = rnd(10);
	if (nnet && e < 5) {
		deliver((int)rnd((unsigned)nnet));
	} else if (nnet && e < 6) {
		int k = (int)rnd((unsigned)nnet);
		nnet--;
		net[k] = net[nnet]; /* lost */
	} else if (e < 8) {
		int i = (int)rnd(2);
		if (!link_ready(&s[i].l) && !s[i].l.draining)
			send_hello(i); /* the retry timer */
	} else {
		int i = (int)rnd(2);
		if (s[i].l.draining) {
			s[i].qps_fresh = true; /* flushed, RESET, INIT */
			act(i, xi_ibv_link_reset_done(&s[i].l));
		}
	}
}

static bool settled(void)
{
	return link_ready(&s[0].l) && link_ready(&s[1].l) && s[0].l.r_epoch == s[1].l.epoch &&
	       s[1].l.r_epoch == s[0].l.epoch;
}

static int run_until_settled(int limit)
{
	int n = 0;
	while (!settled() && n < limit) {
		step();
		n++;
	}
	CHECK(settled());
	return n;
}

static void start(bool both)
{
	memset(s, 0, sizeof(s));
	nnet = 0;
	for (int i = 0; i < 2; i++) {
		xi_ibv_link_init(&s[i].l);
		s[i].qps_fresh = true;
	}
	send_hello(0);
	if (both)
		send_hello(1);
}

int main(void)
{
	int worst = 0;
	for (uint64_t seed = 1; seed <= 4000; seed++) {
		rng = seed;
		start(seed % 2 == 0);
		int n = run_until_settled(20000);
		worst = n > worst ? n : worst;

		/* A failure on one side (a bad rkey fails both QPs of the writer). */
		int one = (int)rnd(2);
		uint32_t e0 = s[one].l.epoch;
		fail(one);
		n = run_until_settled(20000);
		CHECK(s[one].l.epoch > e0);

		/* Both sides fail at once (the responder's QP goes down too). */
		e0 = s[0].l.epoch;
		uint32_t e1 = s[1].l.epoch;
		fail(0);
		fail(1);
		/* A stale retransmission of the old generation arrives late. */
		struct ibv_hello old = {.epoch = e1, .ack_epoch = e0, .flags = IBV_HELLO_READY};
		CHECK(xi_ibv_link_on_hello(&s[0].l, &old) == 0);
		run_until_settled(20000);
		CHECK(s[0].l.epoch > e0 && s[1].l.epoch > e1);
		/* Once settled, the last word needs no answer: the exchange ends. */
		nnet = 0;
		struct ibv_hello last;
		xi_ibv_link_hello_fields(&s[1].l, &last);
		CHECK(xi_ibv_link_on_hello(&s[0].l, &last) == 0);
	}
	printf("handshake: 4000 seeds settled; worst start took %d events\n", worst);

	/* Lossless and in order: three messages from one side's start, and
	 * after a reset of one side (its new HELLO, the peer's reset and new
	 * HELLO, its last word) three again. */
	lossy = false;
	start(false);
	int msgs = 0;
	for (; nnet && msgs < 10; msgs++)
		deliver(0);
	CHECK(settled() && msgs == 3);
	fail(0);
	s[0].qps_fresh = true;
	act(0, xi_ibv_link_reset_done(&s[0].l));
	for (msgs = 0; msgs < 10 && (nnet || s[1].l.draining); msgs++) {
		if (s[1].l.draining && !nnet) {
			s[1].qps_fresh = true;
			act(1, xi_ibv_link_reset_done(&s[1].l));
			msgs--;
			continue;
		}
		deliver(0);
	}
	CHECK(settled() && msgs == 3);
	return 0;
}
