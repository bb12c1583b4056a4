/* Logging: XFER_LOG_LEVEL by name or number, the handler of
 * xfer_log_set_handler (lines from the calling thread and from the worker,
 * none after it is unset), and its promise that once the setter returns no
 * thread is still inside the previous handler. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "util/log.h"

#define MAX_LINES 64

struct capture {
	pthread_mutex_t lock;
	int n;
	int level[MAX_LINES];
	char msg[MAX_LINES][160];
	int other_thread; /* lines from a thread other than main's */
	pthread_t main;
};

static void capture_fn(void *ctx, int level, const char *msg)
{
	struct capture *c = ctx;
	pthread_mutex_lock(&c->lock);
	if (c->n < MAX_LINES) {
		c->level[c->n] = level;
		snprintf(c->msg[c->n], sizeof(c->msg[0]), "%s", msg);
		c->n++;
	}
	if (!pthread_equal(pthread_self(), c->main))
		c->other_thread++;
	pthread_mutex_unlock(&c->lock);
}

static int find(struct capture *c, const char *needle)
{
	pthread_mutex_lock(&c->lock);
	int at = -1;
	for (int i = 0; i < c->n && at < 0; i++)
		if (strstr(c->msg[i], needle))
			at = i;
	pthread_mutex_unlock(&c->lock);
	return at;
}

static int level_from_env(const char *v)
{
	struct xfer_attr a;
	setenv("XFER_LOG_LEVEL", v, 1);
	xfer_attr_init(&a);
	unsetenv("XFER_LOG_LEVEL");
	return a.log_level;
}

static void test_level_names(struct capture *c)
{
	static const struct {
		const char *v;
		int want;
	} cases[] = {{"error", XFER_LOG_ERROR}, {"warn", XFER_LOG_WARN}, {"WARNING", XFER_LOG_WARN},
		     {"info", XFER_LOG_INFO},   {"Debug", XFER_LOG_DEBUG}, {"0", 0},
		     {"2", 2},                  {"0x3", 3},                {"-1", -1}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got = level_from_env(cases[i].v);
		if (got != cases[i].want) {
			fprintf(stderr, "XFER_LOG_LEVEL=%s gives %d, want %d\n", cases[i].v, got, cases[i].want);
			exit(1);
		}
	}
	/* A bad value keeps the default and says so, through the handler. */
	CHECK(level_from_env("verbose") == XFER_LOG_WARN);
	CHECK(level_from_env("3x") == XFER_LOG_WARN);
	int at = find(c, "XFER_LOG_LEVEL=verbose");
	CHECK(at >= 0);
	CHECK(c->level[at] == XFER_LOG_WARN);
	CHECK(strncmp(c->msg[at], "ignoring", 8) == 0); /* no "xfer[pid] warn: " prefix */
	CHECK(!strchr(c->msg[at], '\n'));
	CHECK(find(c, "XFER_LOG_LEVEL=3x") >= 0);
}

/* The NIC report at info level comes from the worker, which opens the NICs. */
static void test_worker_lines(struct capture *c)
{
	struct xfer_attr a;
	xfer_attr_init(&a);
	a.provider = "tcp";
	a.nics = "lo";
	a.log_level = XFER_LOG_INFO;
	xfer_engine_t *e;
	int rc = xfer_engine_create(&a, &e);
	if (rc) {
		fprintf(stderr, "SKIP: no tcp engine on lo: %s\n", xfer_strerror(rc));
		exit(T_SKIP);
	}
	xfer_engine_destroy(e);
	int at = find(c, "NIC 0:");
	CHECK(at >= 0);
	CHECK(c->level[at] == XFER_LOG_INFO);
	CHECK(c->other_thread > 0);
	atomic_store(&xi_log_level, XFER_LOG_WARN);
}

/* Unset: lines go to stderr again, none to the old handler. */
static void test_unset(struct capture *c)
{
	xfer_log_set_handler(NULL, NULL);
	int before = c->n;
	CHECK(level_from_env("nonsense") == XFER_LOG_WARN); /* one warning, on stderr */
	CHECK(c->n == before);
}

/* Handlers whose ctx is torn down right after the switch away from them:
 * a logger still inside one would see it dead. */
struct live_ctx {
	_Atomic int alive;
	_Atomic long calls;
};

static _Atomic int stop_logging;
static _Atomic long dead_calls;

static void live_fn(void *ctx, int level, const char *msg)
{
	struct live_ctx *l = ctx;
	(void)level;
	(void)msg;
	if (!atomic_load(&l->alive))
		atomic_fetch_add(&dead_calls, 1);
	atomic_fetch_add(&l->calls, 1);
	for (volatile int i = 0; i < 200; i++) /* stay inside a little */
		;
	if (!atomic_load(&l->alive))
		atomic_fetch_add(&dead_calls, 1);
}

static void *logger(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_logging))
		xi_log_emit(XFER_LOG_DEBUG, "line %d", 1);
	return NULL;
}

static void test_switch_while_logging(void)
{
	static struct live_ctx ctx[2];
	pthread_t th[2];
	struct live_ctx *cur = &ctx[0];
	atomic_store(&cur->alive, 1);
	xfer_log_set_handler(live_fn, cur);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, logger, NULL);
	long total = 0;
	for (int round = 0; round < 2000; round++) {
		while (atomic_load(&cur->calls) < 2)
			;
		struct live_ctx *next = cur == &ctx[0] ? &ctx[1] : &ctx[0];
		atomic_store(&next->calls, 0);
		atomic_store(&next->alive, 1);
		xfer_log_set_handler(live_fn, next);
		/* The setter has returned: cur may be freed now. */
		atomic_store(&cur->alive, 0);
		total += atomic_load(&cur->calls);
		cur = next;
	}
	atomic_store(&stop_logging, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	xfer_log_set_handler(NULL, NULL);
	if (atomic_load(&dead_calls)) {
		fprintf(stderr, "%ld handler calls ran on a ctx already switched away from\n",
			(long)atomic_load(&dead_calls));
		exit(1);
	}
	printf("test_log: %ld handler calls over 2000 switches, none after its switch\n", total);
}

int main(void)
{
	static struct capture c = {.lock = PTHREAD_MUTEX_INITIALIZER};
	c.main = pthread_self();
	xfer_log_set_handler(capture_fn, &c);
	test_level_names(&c);
	test_worker_lines(&c);
	test_unset(&c);
	test_switch_while_logging();
	printf("test_log: ok\n");
	return 0;
}
