#include "core/call.h"

#include <errno.h>
#include <unistd.h>

#include "core/subq.h"

void xi_engine_kick(xfer_engine_t *e)
{
	/* A busy-polling worker never sleeps (core/thread.c), except while it
	 * stops, and stopping refuses new submissions: no fence to pay. */
	if (e->attr.busy_poll)
		return;
	/* Pairs with the fence in sleep_idle (core/thread.c): either the worker
	 * sees our push or we see it asleep. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&e->worker_sleeping, memory_order_relaxed)) {
		uint64_t one = 1;
		ssize_t r = write(e->wake_fd, &one, sizeof(one));
		(void)r;
	}
}

int xi_engine_call(xfer_engine_t *e, int (*fn)(xfer_engine_t *, void *), void *arg)
{
	struct xi_call call = {.fn = fn, .arg = arg};
	struct sub s = {.kind = SUB_CALL, .peer = XFER_PEER_NONE, .u.call = &call};
	int ret;
	pthread_mutex_lock(&e->ctl_lock);
	if (atomic_load(&e->stopping) || !e->thread_started) {
		pthread_mutex_unlock(&e->ctl_lock);
		return -ESHUTDOWN;
	}
	sem_init(&call.done, 0, 0);
	while (!xi_subq_push(&e->subq, &s)) {
		xi_engine_kick(e);
		usleep(50);
	}
	xi_engine_kick(e);
	while (sem_wait(&call.done) && errno == EINTR)
		;
	sem_destroy(&call.done);
	ret = call.result;
	pthread_mutex_unlock(&e->ctl_lock);
	return ret;
}

void xi_call_run(xfer_engine_t *e, struct xi_call *c)
{
	c->result = c->fn(e, c->arg);
	sem_post(&c->done);
}

void xi_call_refuse(struct xi_call *c)
{
	c->result = -ESHUTDOWN;
	sem_post(&c->done);
}
