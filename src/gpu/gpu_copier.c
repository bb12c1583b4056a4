/* The GPU copy thread (gpu_copier.h). Everything below xi_copier_push and
 * xi_copier_done runs on the thread itself, which alone touches its streams,
 * events and words. */
#include "gpu/gpu_copier.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_api.h"
#include "gpu/gpu_copy.h"
#include "util/log.h"
#include "util/sys.h"

/* After its last copy the thread spins this long before it sleeps: a
 * stream of writes (16 in flight) keeps it awake, and only the first copy
 * after a pause pays the wake-up (the worker's own spin is 50 us too). */
#define XI_COPIER_SPIN_NS 50000ull
/* Word reads between two queries of a pass's event: a copy that fails
 * never writes its word (the fake driver, too, runs copies only when their
 * event is queried). */
#define WORD_QUERY_EVERY 64u
#define FAILED 0x80000000u

/* The copies issued in one pass through the ring, for one device: one
 * event (and one word) for all of them. */
struct pass {
	uint32_t n; /* its commands: the oldest n of fly */
	int dev;
	uint32_t word; /* what the stream writes to words[dev][slot]; 0: none */
	uint32_t polls;
	uint64_t t_closed; /* XFER_GPU_TRACE: when its event was recorded */
};

struct flying {
	uint32_t seq, slot;
};

struct xi_copier {
	const struct cuda_api *c;
	bool want_words, trace; /* as started: read by both threads */
	pthread_t thread;
	/* The worker's: commands, and the tail it releases. */
	struct xi_copier_cmd cmd[XI_COPIER_RING];
	_Alignas(64) atomic_uint tail;
	/* The thread's: how far it has read (the worker's room), its sleep. */
	_Alignas(64) atomic_uint head;
	atomic_uint sleeping;
	_Alignas(64) atomic_uint wake; /* futex word: bumped to wake the thread */
	atomic_uint stop;
	/* Results, by the worker's slot: seq, | FAILED. */
	_Alignas(64) atomic_uint result[XI_COPIER_RING];
	/* The thread's own from here. */
	_Alignas(64) int cur_dev;
	bool words; /* words wanted, and the driver has not refused one */
	CUstream stream[XI_GPU_DEVS];
	CUevent event[XI_GPU_DEVS][XI_COPIER_RING];
	uint32_t *wordmem[XI_GPU_DEVS];
	CUdeviceptr word_dev[XI_GPU_DEVS];
	uint32_t word_seq;
	struct flying fly[XI_COPIER_RING]; /* issued, oldest first */
	uint32_t fly_head, fly_n;
	struct pass pass[XI_COPIER_RING]; /* closed passes, oldest first */
	uint32_t pass_head, pass_n;
	int open_dev;    /* the pass being built: its device, -1 none */
	uint32_t open_n; /* ... and its commands (the newest of fly) */
	/* XFER_GPU_TRACE: what the thread's calls cost, the latest TRACE_KEEP
	 * of each (a mean alone hides a one-off stall). */
	uint64_t copies, passes, queries, query_ns, by_word, by_event, done_passes;
	uint32_t *issue_ns, *close_ns, *seen_ns; /* TRACE_KEEP each, NULL untraced */
};

#define TRACE_KEEP 4096u

/* ------------------------------------------------------- the worker's side */

bool xi_copier_push(struct xi_copier *k, const struct xi_copier_cmd *cmd)
{
	unsigned t = atomic_load_explicit(&k->tail, memory_order_relaxed);
	if (t - atomic_load_explicit(&k->head, memory_order_acquire) >= XI_COPIER_RING)
		return false;
	k->cmd[t % XI_COPIER_RING] = *cmd;
	atomic_store_explicit(&k->tail, t + 1, memory_order_release);
	/* Against the thread's store of sleeping and its read of tail: one of
	 * the two sees the other's store. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&k->sleeping, memory_order_relaxed)) {
		atomic_fetch_add_explicit(&k->wake, 1, memory_order_release);
		xi_futex_wake_all(&k->wake);
	}
	return true;
}

int xi_copier_done(const struct xi_copier *k, uint32_t slot, uint32_t seq)
{
	unsigned v = atomic_load_explicit(&k->result[slot % XI_COPIER_RING], memory_order_acquire);
	if ((v & ~FAILED) != seq)
		return 0;
	return v & FAILED ? -EIO : 1;
}

int xi_copier_piece_issue(const struct cuda_api *c, const struct xi_copier_piece *p, CUstream st)
{
	CUresult r = p->to_host ? c->cuMemcpyDtoHAsync(p->host, (CUdeviceptr)p->dev, p->len, st)
				: c->cuMemcpyHtoDAsync((CUdeviceptr)p->dev, p->host, p->len, st);
	return r ? -EIO : 0;
}

/* ------------------------------------------------------- the thread's side */

static void publish(struct xi_copier *k, const struct flying *f, bool failed)
{
	atomic_store_explicit(&k->result[f->slot % XI_COPIER_RING], f->seq | (failed ? FAILED : 0), memory_order_release);
}

/* Device dev current, with its stream (made by xi_copier_prepare): NULL if
 * either cannot be had. */
static CUstream stream_on(struct xi_copier *k, int dev)
{
	if (dev < 0 || dev >= XI_GPU_DEVS || !k->stream[dev])
		return NULL;
	if (k->cur_dev != dev) {
		if (xi_cuda_use_device(dev))
			return NULL;
		k->cur_dev = dev;
	}
	return k->stream[dev];
}

static int issue(struct xi_copier *k, const struct xi_copier_cmd *cmd)
{
	const struct cuda_api *c = k->c;
	CUstream st = stream_on(k, cmd->dev);
	if (!st)
		return -EIO;
	uint64_t t0 = k->trace ? xi_now_ns() : 0;
	for (uint32_t i = 0; i < cmd->n && i < XI_COPIER_PIECES; i++)
		if (xi_copier_piece_issue(c, &cmd->p[i], st))
			return -EIO;
	if (k->trace)
		k->issue_ns[k->copies++ % TRACE_KEEP] = (uint32_t)(xi_now_ns() - t0);
	return 0;
}

/* The stream's word after the open pass's copies: 0 (no word for dev, or
 * the driver refused one: the event alone from now on) or the value it
 * will write. */
static uint32_t pass_word(struct xi_copier *k, int dev, CUstream st, uint32_t slot)
{
	if (!k->words || !k->wordmem[dev])
		return 0;
	uint32_t v = ++k->word_seq ? k->word_seq : ++k->word_seq; /* never 0 */
	if (k->c->cuStreamWriteValue32(st, k->word_dev[dev] + slot * sizeof(uint32_t), v, 0)) {
		k->words = false;
		return 0;
	}
	return v;
}

/* Fails the newest n commands in flight (a pass that could not close). */
static void fail_newest(struct xi_copier *k, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t at = (k->fly_head + k->fly_n - 1) % XI_COPIER_RING;
		publish(k, &k->fly[at], true);
		k->fly_n--;
	}
}

/* One event (and word) for the copies issued since the last: their pass. */
static void close_pass(struct xi_copier *k)
{
	if (!k->open_n)
		return;
	const struct cuda_api *c = k->c;
	int dev = k->open_dev;
	uint32_t n = k->open_n, slot = (k->pass_head + k->pass_n) % XI_COPIER_RING;
	k->open_n = 0;
	k->open_dev = -1;
	uint64_t t0 = k->trace ? xi_now_ns() : 0;
	CUstream st = stream_on(k, dev);
	CUevent *ev = &k->event[dev][slot];
	if (!st) {
		fail_newest(k, n);
		return;
	}
	uint32_t word = pass_word(k, dev, st, slot);
	if (c->cuEventRecord(*ev, st)) {
		fail_newest(k, n);
		return;
	}
	k->pass[slot] = (struct pass){.n = n, .dev = dev, .word = word, .t_closed = k->trace ? xi_now_ns() : 0};
	k->pass_n++;
	if (k->trace)
		k->close_ns[k->passes++ % TRACE_KEEP] = (uint32_t)(xi_now_ns() - t0);
}

/* Issues every command the worker has released: 1 if there were any. */
static int take(struct xi_copier *k)
{
	unsigned h = atomic_load_explicit(&k->head, memory_order_relaxed);
	unsigned t = atomic_load_explicit(&k->tail, memory_order_acquire);
	if (h == t)
		return 0;
	/* In flight at most XI_COPIER_RING: the worker keeps no more, except
	 * after forgetting its copies at stop (xi_gpu_forget); then later
	 * commands wait here, and the worker's further ones find the ring full. */
	for (; h != t && k->fly_n < XI_COPIER_RING; h++) {
		struct xi_copier_cmd cmd = k->cmd[h % XI_COPIER_RING];
		atomic_store_explicit(&k->head, h + 1, memory_order_release); /* the worker may reuse it */
		if (k->open_n && k->open_dev != cmd.dev)
			close_pass(k);
		struct flying f = {.seq = cmd.seq, .slot = cmd.slot};
		if (issue(k, &cmd)) {
			publish(k, &f, true);
			continue;
		}
		k->fly[(k->fly_head + k->fly_n) % XI_COPIER_RING] = f;
		k->fly_n++;
		k->open_dev = cmd.dev;
		k->open_n++;
	}
	close_pass(k);
	return 1;
}

/* 1 done, -EIO failed, 0 still running. */
static int pass_state(struct xi_copier *k, struct pass *p, uint32_t slot)
{
	if (p->word && __atomic_load_n(&k->wordmem[p->dev][slot], __ATOMIC_ACQUIRE) == p->word) {
		k->by_word += k->trace;
		return 1; /* the stream got past its copies */
	}
	if (p->word && ++p->polls % WORD_QUERY_EVERY)
		return 0;
	if (stream_on(k, p->dev) == NULL)
		return -EIO;
	uint64_t t0 = k->trace ? xi_now_ns() : 0;
	CUresult r = k->c->cuEventQuery(k->event[p->dev][slot]);
	if (k->trace) {
		k->query_ns += xi_now_ns() - t0;
		k->queries++;
	}
	k->by_event += k->trace && r != CUDA_ERROR_NOT_READY;
	return r == CUDA_ERROR_NOT_READY ? 0 : r ? -EIO : 1;
}

/* Publishes the passes that ended, oldest first: 1 if any did. */
static int reap(struct xi_copier *k)
{
	int any = 0;
	while (k->pass_n) {
		uint32_t slot = k->pass_head;
		struct pass *p = &k->pass[slot];
		int st = pass_state(k, p, slot);
		if (!st)
			break;
		if (k->trace)
			k->seen_ns[k->done_passes++ % TRACE_KEEP] = (uint32_t)(xi_now_ns() - p->t_closed);
		for (uint32_t i = 0; i < p->n; i++) {
			publish(k, &k->fly[k->fly_head], st < 0);
			k->fly_head = (k->fly_head + 1) % XI_COPIER_RING;
			k->fly_n--;
		}
		k->pass_head = (k->pass_head + 1) % XI_COPIER_RING;
		k->pass_n--;
		any = 1;
	}
	return any;
}

static void idle_wait(struct xi_copier *k)
{
	unsigned seen = atomic_load_explicit(&k->wake, memory_order_acquire);
	atomic_store(&k->sleeping, 1);
	if (atomic_load(&k->tail) == atomic_load_explicit(&k->head, memory_order_relaxed) && !atomic_load(&k->stop))
		xi_futex_wait_ms(&k->wake, seen, 100);
	atomic_store(&k->sleeping, 0);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* p50 / p90 / max of the latest of n values kept, in microseconds. */
static void trace_stage(const char *name, uint32_t *v, uint64_t n)
{
	size_t m = n < TRACE_KEEP ? (size_t)n : TRACE_KEEP;
	if (!m)
		return;
	qsort(v, m, sizeof(*v), cmp_u32);
	xinfo("XFER_GPU_TRACE copier %-32s n %6zu  p50 %8.2f  p90 %8.2f  max %9.2f us", name, m, v[m / 2] / 1e3,
	      v[m * 9 / 10] / 1e3, v[m - 1] / 1e3);
}

static void teardown(struct xi_copier *k)
{
	const struct cuda_api *c = k->c;
	for (int dev = 0; dev < XI_GPU_DEVS; dev++) {
		if (xi_cuda_use_device(dev))
			continue;
		if (k->stream[dev])
			c->cuStreamSynchronize(k->stream[dev]); /* copies still reading mirrors */
		for (uint32_t i = 0; i < XI_COPIER_RING; i++)
			if (k->event[dev][i])
				c->cuEventDestroy(k->event[dev][i]);
		if (k->stream[dev])
			c->cuStreamDestroy(k->stream[dev]);
		if (k->wordmem[dev])
			c->cuMemFreeHost(k->wordmem[dev]);
	}
	if (k->trace && k->copies) {
		xinfo("XFER_GPU_TRACE copier: %llu copies in %llu passes (%.2f a pass); %llu event queries, mean %.2f us; "
		      "passes seen done by their word %llu, by their event %llu",
		      (unsigned long long)k->copies, (unsigned long long)k->passes,
		      k->passes ? (double)k->copies / (double)k->passes : 0.0, (unsigned long long)k->queries,
		      k->queries ? (double)k->query_ns / (double)k->queries / 1e3 : 0.0, (unsigned long long)k->by_word,
		      (unsigned long long)k->by_event);
		trace_stage("issue a copy (cuMemcpy*Async)", k->issue_ns, k->copies);
		trace_stage("close a pass (word + event)", k->close_ns, k->passes);
		trace_stage("pass closed->seen done", k->seen_ns, k->done_passes);
	}
	free(k->issue_ns);
	free(k->close_ns);
	free(k->seen_ns);
}

static void *copier_main(void *arg)
{
	struct xi_copier *k = arg;
	pthread_setname_np(pthread_self(), "xfer-gpu-copy"); /* for ps and top (and the fake driver's counts) */
	const bool yields = xi_spin_yields();
	uint64_t last = xi_now_ns();
	while (!atomic_load_explicit(&k->stop, memory_order_acquire)) {
		int did = take(k);
		did |= reap(k);
		if (did || k->pass_n) {
			if (did)
				last = xi_now_ns();
			xi_cpu_relax();
			continue;
		}
		if (xi_now_ns() - last < XI_COPIER_SPIN_NS) {
			if (yields)
				sched_yield(); /* few CPUs: the worker may need this one */
			else
				xi_cpu_relax();
			continue;
		}
		idle_wait(k);
		last = xi_now_ns();
	}
	teardown(k);
	return NULL;
}

struct xi_copier *xi_copier_start(const struct cuda_api *c, bool words)
{
	struct xi_copier *k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->c = c;
	k->want_words = k->words = words && c->cuStreamWriteValue32;
	k->trace = getenv("XFER_GPU_TRACE") && *getenv("XFER_GPU_TRACE");
	if (k->trace) {
		k->issue_ns = malloc(TRACE_KEEP * sizeof(uint32_t));
		k->close_ns = malloc(TRACE_KEEP * sizeof(uint32_t));
		k->seen_ns = malloc(TRACE_KEEP * sizeof(uint32_t));
		k->trace = k->issue_ns && k->close_ns && k->seen_ns;
	}
	k->cur_dev = -1;
	k->open_dev = -1;
	if (pthread_create(&k->thread, NULL, copier_main, k)) {
		free(k->issue_ns);
		free(k->close_ns);
		free(k->seen_ns);
		free(k);
		return NULL;
	}
	return k;
}

int xi_copier_prepare(struct xi_copier *k, int dev)
{
	const struct cuda_api *c = k->c;
	if (dev < 0 || dev >= XI_GPU_DEVS)
		return -EINVAL;
	if (k->stream[dev])
		return 0;
	CUstream st = NULL;
	if (c->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING))
		return -EIO;
	for (uint32_t i = 0; i < XI_COPIER_RING; i++) {
		if (c->cuEventCreate(&k->event[dev][i], CU_EVENT_DISABLE_TIMING)) {
			while (i--)
				c->cuEventDestroy(k->event[dev][i]);
			memset(k->event[dev], 0, sizeof(k->event[dev]));
			c->cuStreamDestroy(st);
			return -EIO;
		}
	}
	/* Without words the thread queries events: slower, still correct. */
	if (k->want_words && (c->cuMemHostAlloc((void **)&k->wordmem[dev], XI_COPIER_RING * sizeof(uint32_t),
					   CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) ||
			 c->cuMemHostGetDevicePointer(&k->word_dev[dev], k->wordmem[dev], 0))) {
		if (k->wordmem[dev])
			c->cuMemFreeHost(k->wordmem[dev]);
		k->wordmem[dev] = NULL;
	}
	if (k->wordmem[dev])
		memset(k->wordmem[dev], 0, XI_COPIER_RING * sizeof(uint32_t));
	k->stream[dev] = st; /* published to the thread by the release of the next command */
	return 0;
}

void xi_copier_stop(struct xi_copier *k)
{
	if (!k)
		return;
	atomic_store_explicit(&k->stop, 1, memory_order_release);
	atomic_fetch_add_explicit(&k->wake, 1, memory_order_release);
	xi_futex_wake_all(&k->wake);
	pthread_join(k->thread, NULL);
	free(k);
}
