
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *t_provider(void)
{
	const char *p = getenv("XFER_TEST_PROVIDER");
	return p && *p ? p : "tcp";
}

unsigned t_time_scale(void)
{
	const char *v = getenv("XFER_TEST_TIME_SCALE");
	long x = v && *v ? strtol(v, NULL, 10) : 1;
	return x >= 1 && x <= 50 ? (unsigned)x : 1;
}

/* Set in every process t_run_procs forks. */
static int in_child;

void t_attr(struct xfer_attr *a)
{
	xfer_attr_init(a);
	a->provider = t_provider();
	/* Forked processes may take other NICs than their parent
	 * (XFER_NICS_CHILD), so that RDMA devices joined by a cable talk to
	 * each other instead of each to itself. */
	const char *nics = getenv("XFER_NICS"), *child = getenv("XFER_NICS_CHILD");
	if (in_child && child && *child)
		nics = child;
	if (!strcmp(a->provider, "tcp") || !strcmp(a->provider, "tcp;ofi_rxm"))
		a->nics = nics ? nics : "lo";
	else
		a->nics = nics && *nics ? nics : NULL;
	a->timeout_ms = 30000ull * t_time_scale();
}

xfer_engine_t *t_engine(const struct xfer_attr *a)
{
	xfer_engine_t *e = NULL;
	int rc = xfer_engine_create(a, &e);
	if (rc == -XFER_ENOPROV || rc == -ENODEV) {
		fprintf(stderr, "SKIP: provider %s not available: %s\n", a->provider, xfer_strerror(rc));
		exit(T_SKIP);
	}
	CHECK_OK(rc);
	return e;
}

static void write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n > 0);
		p += n;
		len -= (size_t)n;
	}
}

static void read_all(int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n > 0);
		p += n;
		len -= (size_t)n;
	}
}

void t_send_u64(int fd, uint64_t v)
{
	write_all(fd, &v, sizeof(v));
}

uint64_t t_recv_u64(int fd)
{
	uint64_t v;
	read_all(fd, &v, sizeof(v));
	return v;
}

void t_send_blob(int fd, const void *buf, size_t len)
{
	t_send_u64(fd, len);
	write_all(fd, buf, len);
}

size_t t_recv_blob(int fd, void *buf, size_t cap)
{
	uint64_t len = t_recv_u64(fd);
	CHECK(len <= cap);
	read_all(fd, buf, len);
	return len;
}

xfer_peer_t t_connect(xfer_engine_t *e, int fd)
{
	uint8_t mine[XFER_ADDR_MAX], theirs[XFER_ADDR_MAX];
	int len = xfer_engine_addr(e, mine, sizeof(mine), NULL);
	CHECK(len > 0);
	t_send_blob(fd, mine, (size_t)len);
	size_t tlen = t_recv_blob(fd, theirs, sizeof(theirs));
	xfer_peer_t p;
	CHECK_OK(xfer_peer_add(e, theirs, tlen, &p));
	return p;
}

void t_send_desc(int fd, const xfer_mr_t *mr)
{
	uint8_t d[XFER_DESC_MAX];
	int len = xfer_mr_desc(mr, d, sizeof(d), NULL);
	CHECK(len > 0);
	t_send_blob(fd, d, (size_t)len);
}

xfer_rmr_t *t_recv_rmr(xfer_engine_t *e, xfer_peer_t peer, int fd)
{
	uint8_t d[XFER_DESC_MAX];
	size_t len = t_recv_blob(fd, d, sizeof(d));
	xfer_rmr_t *r = NULL;
	CHECK_OK(xfer_rmr_import(e, peer, d, len, &r));
	return r;
}

void t_sync_worker(xfer_engine_t *e)
{
	uint32_t ignored;
	CHECK_OK(xfer_imm_disarm(e, 0xfffffff7u, &ignored));
}

struct xfer_cqe t_wait_cqe(xfer_engine_t *e, uint64_t timeout_ms)
{
	struct xfer_cqe c;
	timeout_ms *= t_time_scale();
	int n = xfer_cq_wait(e, &c, 1, timeout_ms);
	if (n != 1) {
		fprintf(stderr, "no completion within %llu ms: %s\n", (unsigned long long)timeout_ms,
			xfer_strerror(n));
		exit(1);
	}
	return c;
}

uint64_t t_rand(uint64_t *s)
{
	/* splitmix64: fast, and both processes derive the same stream. */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void t_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t s = seed;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t v = t_rand(&s);
		memcpy(p + i, &v, 8);
	}
	if (i < len) {
		uint64_t v = t_rand(&s);
		memcpy(p + i, &v, len - i);
	}
}

uint64_t t_checksum(const void *buf, size_t len)
{
	/* FNV-1a over 64-bit words: order-sensitive, cheap enough for 64 MiB. */
	const uint8_t *p = buf;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

int t_child_may_die = -1;

/* The shm provider names its files after the owner's pid; a process killed
 * before it closed its endpoint leaves them behind. */
static void remove_shm_of(pid_t pid)
{
	char prefix[32];
	int plen = snprintf(prefix, sizeof(prefix), "%d:", (int)pid);
	DIR *d = opendir("/dev/shm");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, prefix, (size_t)plen)) {
			char path[300];
			snprintf(path, sizeof(path), "/dev/shm/%s", de->d_name);
			unlink(path);
		}
	closedir(d);
}

static void remove_own_shm(void)
{
	remove_shm_of(getpid());
}

int t_run_procs(int n, t_proc_fn child, t_parent_fn parent, void *arg)
{
	int fds[64] = {0};
	pid_t pids[64] = {0};
	CHECK(n > 0 && n <= 64);
	for (int i = 0; i < n; i++) {
		int sv[2];
		CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			in_child = 1;
			close(sv[0]);
			for (int k = 0; k < i; k++)
				close(fds[k]);
			int rc = child(i, sv[1], arg);
			fflush(NULL);
			_exit(rc);
		}
		close(sv[1]);
		fds[i] = sv[0];
		pids[i] = pid;
	}
	atexit(remove_own_shm);
	/* A child that fails closes its socket; report that, do not die of it. */
	signal(SIGPIPE, SIG_IGN);
	int rc = parent ? parent(n, fds, arg) : 0;
	for (int i = 0; i < n; i++) {
		int status = 0;
		if (rc)
			kill(pids[i], SIGKILL);
		waitpid(pids[i], &status, 0);
		/* A child that failed a check exits without closing its engines. */
		remove_shm_of(pids[i]);
		if (i == t_child_may_die && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
			continue;
		if (!rc && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
			fprintf(stderr, "child %d failed (status 0x%x)\n", i, status);
			rc = 1;
		}
		close(fds[i]);
	}
	return rc;
}

struct pair_arg {
	t_proc_fn a, b;
	void *arg;
};

static int pair_parent(int n, const int *fds, void *arg)
{
	(void)n;
	struct pair_arg *pa = arg;
	return pa->a(0, fds[0], pa->arg);
}

static int pair_child(int idx, int fd, void *arg)
{
	(void)idx;
	struct pair_arg *pa = arg;
	return pa->b(1, fd, pa->arg);
}

int t_run_pair(t_proc_fn a, t_proc_fn b, void *arg)
{
	struct pair_arg pa = {a, b, arg};
	return t_run_procs(1, pair_child, pair_parent, &pa);
}

int t_run_isolated(int (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int rc = fn();
		fflush(NULL);
		_exit(rc);
	}
	int status = 0;
	CHECK(waitpid(pid, &status, 0) == pid);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	fprintf(stderr, "isolated run died (status 0x%x)\n", status);
	return 1;
}

uint64_t t_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void t_check_wait_deadlines(xfer_engine_t *e)
{
	struct xfer_cqe c[4];
	uint8_t buf[64];
	uint64_t t0 = t_now_ms();
	CHECK_RC(xfer_cq_wait(e, c, 4, 50), -ETIMEDOUT);
	uint64_t took = t_now_ms() - t0;
	CHECK(took >= 50 && took < 2000);
	t0 = t_now_ms();
	CHECK_RC(xfer_recv_wait(e, buf, sizeof(buf), NULL, 50), -ETIMEDOUT);
	took = t_now_ms() - t0;
	CHECK(took >= 50 && took < 2000);
	t0 = t_now_ms();
	CHECK_RC(xfer_cq_wait(e, c, 4, 0), -ETIMEDOUT);
	CHECK(t_now_ms() - t0 < 1000);
}
