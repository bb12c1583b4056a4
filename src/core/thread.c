/* The worker thread's life: pin, bring the NICs up on the pinned core (so that
 * their memory is NUMA-local), loop, and quiesce on stop. */

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "core/bringup.h"
#include "core/drive.h"
#include "core/loop.h"
#include "core/worker.h"
#include "gpu/gpu_copy.h"
#include "util/log.h"
#include "util/sys.h"
#include "util/topology.h"

static void pin(xfer_engine_t *e, int cpu)
{
	if (cpu == XFER_CPU_AUTO) {
		/* The NICs are not open yet; the first requested name is the one. */
		char first[64] = "";
		if (e->nics_req)
			sscanf(e->nics_req, "%63[^,]", first);
		int got = first[0] ? xi_topology_pin_near(first) : -ENODEV;
		if (got >= 0)
			xinfo("worker pinned near %s (CPU %d first)", first, got);
		else
			xinfo("worker left unpinned: no locality known for %s", first[0] ? first : "(default NIC)");
		return;
	}
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	int ret = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	if (ret)
		xwarn("cannot pin worker to CPU %d: %s", cpu, xfer_strerror(-ret));
}

static int setup_epoll(struct worker *w)
{
	xfer_engine_t *e = w->e;
	struct epoll_event ev = {.events = EPOLLIN};
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->epfd < 0)
		return -errno;
	ev.data.fd = e->wake_fd;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, e->wake_fd, &ev))
		return -errno;
	w->all_nics_have_fd = true;
	for (unsigned n = 0; n < e->nnics; n++) {
		int fd = e->ops.wait_fd(&e->nics[n]);
		if (fd < 0) {
			w->all_nics_have_fd = false;
			continue;
		}
		ev.data.fd = fd;
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev))
			w->all_nics_have_fd = false;
	}
	return 0;
}

/* Sleeps until a submission, a NIC event or the next deadline. Without a NIC
 * wait object the sleep is a short doze, because a provider with manual
 * progress moves a peer's data only while we poll. */
static void sleep_idle(struct worker *w, uint64_t now)
{
	xfer_engine_t *e = w->e;
	atomic_store(&e->worker_sleeping, 1);
	atomic_thread_fence(memory_order_seq_cst);
	if (!xi_mpmc_empty_hint(&e->subq) || !xi_mpmc_empty_hint(&e->repost) ||
	    atomic_load(&e->stopping) || xi_worker_busy(w))
		goto awake;
	for (unsigned n = 0; n < e->nnics; n++)
		if (e->ops.trywait(&e->nics[n]) != 0)
			goto awake;
	/* Without a wait object nothing wakes us when a peer's data arrives, and
	 * with manual progress nothing lands while we sleep: doze briefly first
	 * (20 us), doubling while idle up to 1 ms. */
	uint64_t limit_ns = w->all_nics_have_fd ? 100000000ull : w->doze_ns;
	if (!w->all_nics_have_fd)
		w->doze_ns = w->doze_ns * 2 > 1000000 ? 1000000 : w->doze_ns * 2;
	if (w->next_scan_ns > now && w->next_scan_ns - now < limit_ns)
		limit_ns = w->next_scan_ns - now;
	struct epoll_event evs[XFER_NIC_MAX + 1];
	struct timespec ts = {.tv_sec = (time_t)(limit_ns / 1000000000ull),
			      .tv_nsec = (long)(limit_ns % 1000000000ull)};
	xi_stat_own_add(&e->st.worker_sleeps, 1);
	epoll_pwait2(w->epfd, evs, XFER_NIC_MAX + 1, &ts, NULL);
	uint64_t drain;
	while (read(e->wake_fd, &drain, sizeof(drain)) > 0)
		;
awake:
	atomic_store(&e->worker_sleeping, 0);
}

struct worker_start {
	xfer_engine_t *e;
	sem_t ready;
	int result;
};

static void *worker_main_impl(struct worker_start *st)
{
	xfer_engine_t *e = st->e;
	pin(e, e->attr.worker_cpu);
	/* Allocated after pinning so that first touch places it on our node. */
	struct worker *w = calloc(1, sizeof(*w));
	int ret = w ? 0 : -ENOMEM;
	if (w) {
		w->e = e;
		w->epfd = -1;
		w->doze_ns = 20000;
		e->w = w;
		ret = xi_engine_bringup(e, w);
		if (!ret)
			ret = setup_epoll(w);
	}
	st->result = ret;
	sem_post(&st->ready);
	if (ret)
		return NULL;

	const uint64_t spin_ns = (uint64_t)e->attr.spin_us * 1000;
	const bool yields = xi_spin_yields();
	uint64_t idle_since = xi_now_ns();
	const bool drive = e->drive_ok;
	while (!atomic_load_explicit(&e->stopping, memory_order_acquire)) {
		/* busy_poll 2: a waiting application thread may ask for the
		 * turns (core/drive.c); parked until they come back. */
		if (drive)
			xi_drive_worker(w);
		uint64_t now = xi_now_ns();
		if (xi_worker_loop_once(w, now)) {
			idle_since = now;
			w->doze_ns = 20000;
			continue;
		}
		if (e->attr.busy_poll || e->attr.spin_us == XFER_SPIN_FOREVER) {
			/* Busy-poll mode (or a worker told to spin for ever): this core
			 * is the engine's; never give it away. */
			xi_cpu_relax();
			continue;
		}
		/* A GPU copy of ours in flight: its completion is ours to see, and
		 * sleep_idle would refuse to sleep anyway (xi_worker_busy), only
		 * raising the sleep flag each turn, for which every submitter then
		 * writes the eventfd. The copy ends, or fails, in the driver. A
		 * peer's copy to us that it announced: its notice is due when the
		 * copy ends, and a sleeping worker would take it a wake-up later
		 * (bounded: core/notice.c). */
		if (now - idle_since < spin_ns || xi_worker_copying(w, now)) {
			/* On few cores the thread with new work may be waiting for ours:
			 * give the CPU away while spinning (idle path only). */
			if (yields)
				sched_yield();
			else
				xi_cpu_relax();
			continue;
		}
		sleep_idle(w, now);
	}
	xi_worker_quiesce(w, -ECANCELED);
	/* Its CUDA streams and events go with the thread that used them. */
	xi_gpu_destroy(w->gpu);
	w->gpu = NULL;
	return NULL;
}

static void *worker_main(void *arg)
{
	return worker_main_impl(arg);
}

int xi_worker_create(xfer_engine_t *e)
{
	struct worker_start st = {.e = e};
	sem_init(&st.ready, 0, 0);
	int ret = pthread_create(&e->thread, NULL, worker_main, &st);
	if (ret) {
		sem_destroy(&st.ready);
		return -ret;
	}
	e->thread_started = true;
	while (sem_wait(&st.ready) && errno == EINTR)
		;
	sem_destroy(&st.ready);
	if (st.result) {
		pthread_join(e->thread, NULL);
		e->thread_started = false;
	}
	return st.result;
}

void xi_worker_destroy(xfer_engine_t *e)
{
	struct worker *w = e->w;
	if (!w)
		return;
	if (w->epfd >= 0)
		close(w->epfd);
	xi_gpu_destroy(w->gpu); /* bring-up failed before the loop started */
	xi_worker_free(w);
	free(w);
	e->w = NULL;
}
