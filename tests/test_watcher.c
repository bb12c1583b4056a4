/* The watcher calls back with (old, new) on every change a producer makes
 * (here a CPU thread; on the GPU machine a kernel, see tests/gpu), and a
 * completion's signal word flips before the completion is delivered, so a
 * poller of that word (a GPU kernel, in production) can start at once. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

#define BUMPS 2000

static atomic_uint_fast64_t seen_last, calls, bad;

static void on_change(void *ctx, uint64_t old_value, uint64_t new_value)
{
	(void)ctx;
	if (new_value <= old_value || old_value != atomic_load(&seen_last))
		atomic_fetch_add(&bad, 1);
	atomic_store(&seen_last, new_value);
	atomic_fetch_add(&calls, 1);
}

static void watcher_case(void)
{
	xfer_watcher_t *w;
	CHECK_OK(xfer_watcher_create(on_change, NULL, 200, &w));
	volatile uint64_t *word = xfer_watcher_word(w);
	CHECK(*word == 0);
	for (uint64_t v = 1; v <= BUMPS; v++) {
		__atomic_store_n(word, v, __ATOMIC_RELEASE);
		/* Wait for the callback (bounded), as a layer-by-layer producer would. */
		for (int spins = 0; atomic_load(&seen_last) != v && spins < 2000000; spins++)
			;
		if (v % 500 == 0)
			usleep(2000); /* let the thread back off to sleeping, then wake it */
	}
	for (int i = 0; i < 1000 && atomic_load(&seen_last) != BUMPS; i++)
		usleep(1000);
	CHECK(atomic_load(&seen_last) == BUMPS);
	CHECK(atomic_load(&bad) == 0);
	CHECK(atomic_load(&calls) <= BUMPS);
	xfer_watcher_destroy(w);
	CHECK_RC(xfer_watcher_create(NULL, NULL, 0, &w), -EINVAL);
}

static int sender(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t p = t_connect(e, fd);
	CHECK(t_recv_u64(fd) == 1);
	CHECK_OK(xfer_write_imm(e, p, 77, NULL));
	CHECK_RC(t_wait_cqe(e, 10000).res, 0);
	CHECK(t_recv_u64(fd) == 2);
	xfer_engine_destroy(e);
	return 0;
}

static int receiver(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	(void)t_connect(e, fd);
	static volatile uint64_t flag;
	struct xfer_completion c = {.user_data = 5, .signal = &flag, .signal_value = 0xabc};
	CHECK_OK(xfer_expect_imm(e, 77, 1, &c));
	t_send_u64(fd, 1);
	for (int i = 0; i < 10000000 && __atomic_load_n(&flag, __ATOMIC_ACQUIRE) != 0xabc; i++)
		if (i > 1000)
			usleep(1);
	CHECK(flag == 0xabc);
	struct xfer_cqe cqe = t_wait_cqe(e, 10000);
	CHECK(cqe.user_data == 5 && cqe.res == 0);
	t_send_u64(fd, 2);
	xfer_engine_destroy(e);
	return 0;
}

int main(void)
{
	watcher_case();
	return t_run_pair(sender, receiver, NULL);
}
