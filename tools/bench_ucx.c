/* UCX for comparison: Debian's ucx_perftest, server on the target's side and
 * client on ours, its figures parsed from the client's output. ucx_perftest
 * runs a fixed count, so the count is sized from the rate UCX showed last
 * time, and a client that overruns its deadline is killed; the last
 * per-second report it printed is then what we show. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "bench_impl.h"

#define PERFTEST "ucx_perftest"

static pid_t server_pid = -1;
static int server_out = -1;

bool ucx_available(void)
{
	const char *path = getenv("PATH");
	char *copy = strdup(path ? path : "/usr/bin:/bin"), *save = NULL;
	bool found = false;
	for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		char full[4096];
		snprintf(full, sizeof(full), "%s/%s", d, PERFTEST);
		found = access(full, X_OK) == 0;
	}
	free(copy);
	return found;
}

static void set_env(const char *tls, const char *nic)
{
	setenv("UCX_TLS", tls, 1);
	/* Keep UCX on the NIC the engine uses (loopback by default). */
	if (nic && strcmp(tls, "tcp") == 0)
		setenv("UCX_NET_DEVICES", nic, 1);
	else
		unsetenv("UCX_NET_DEVICES");
	setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
}

/* Starts argv with stdout+stderr on a pipe; returns the child. */
static pid_t spawn(char *const argv[], const char *tls, const char *nic, int *out_fd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		set_env(tls, nic);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return -1;
	}
	*out_fd = p[0];
	return pid;
}

/* Reads all a child prints until it exits or the deadline passes (then it
 * is killed). Returns the exit status, or -ETIMEDOUT. */
static int collect(pid_t pid, int fd, char *buf, size_t cap, uint64_t deadline_ns)
{
	size_t len = 0;
	int status = 0, ret = 0;
	for (;;) {
		uint64_t now = bench_now_ns();
		if (now >= deadline_ns) {
			kill(pid, SIGKILL);
			ret = -ETIMEDOUT;
			break;
		}
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int left = (int)((deadline_ns - now) / 1000000) + 1;
		if (poll(&pfd, 1, left) <= 0)
			continue;
		ssize_t n = read(fd, buf + len, len + 1 < cap ? cap - len - 1 : 0);
		if (n <= 0 && len + 1 < cap)
			break; /* EOF: the child closed its output */
		if (n > 0)
			len += (size_t)n;
		else
			len = 0; /* full: keep the tail, which holds the figures */
	}
	buf[len] = 0;
	close(fd);
	waitpid(pid, &status, 0);
	if (ret)
		return ret;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A port nobody listens on now, as likely to stay free as any. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int port = -1;
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    !getsockname(fd, (struct sockaddr *)&a, &len))
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* ucx_perftest prints no line when its server is ready, and a test connect
 * would use up its one accept: look for the listening socket instead. */
static bool port_listening(int port)
{
	static const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	for (int f = 0; f < 2; f++) {
		FILE *fp = fopen(files[f], "r");
		char line[512];
		if (!fp)
			continue;
		while (fgets(line, sizeof(line), fp)) {
			char *colon = strchr(line, ':');
			unsigned lport, state;
			/* "  0: 00000000:3439 00000000:0000 0A ..." */
			if (!colon || !(colon = strchr(colon + 1, ':')))
				continue;
			if (sscanf(colon + 1, "%x %*s %x", &lport, &state) == 2 && (int)lport == port &&
			    state == 0x0A) {
				fclose(fp);
				return true;
			}
		}
		fclose(fp);
	}
	return false;
}

int ucx_serve(struct ctl *ctl, const struct ctl_ucx *req, const char *nic)
{
	char tls[sizeof(req->tls) + 1] = {0}, portstr[16];
	memcpy(tls, req->tls, sizeof(req->tls));
	int port = free_port(), ret = 0;
	snprintf(portstr, sizeof(portstr), "%d", port);
	char *argv[] = {PERFTEST, "-p", portstr, NULL};
	if (port < 0 || !ucx_available()) {
		ret = -ENOENT;
	} else {
		server_pid = spawn(argv, tls, nic, &server_out);
		if (server_pid < 0)
			ret = -errno;
	}
	uint64_t until = bench_now_ns() + 5000000000ull;
	while (!ret && !port_listening(port)) {
		if (bench_now_ns() > until || waitpid(server_pid, NULL, WNOHANG) == server_pid) {
			ret = -ECONNREFUSED;
			break;
		}
		nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
	}
	return case_reply(ctl, ret, 0, portstr);
}

/* MSG_UCX_WAIT: the client is done; the server exits by itself after one test. */
static int ucx_reap_server(void)
{
	if (server_pid <= 0)
		return 0;
	char buf[8192];
	int status = collect(server_pid, server_out, buf, sizeof(buf), bench_now_ns() + 5000000000ull);
	server_pid = -1;
	server_out = -1;
	return status;
}

int ucx_serve_wait(struct ctl *ctl)
{
	int st = ucx_reap_server();
	return case_reply(ctl, 0, 0, st ? "server did not exit cleanly" : "");
}

/* The last report line: "Final:" or a per-second one, eight numbers:
 * iterations, latency p50/avg/overall (us), MB/s avg/overall, msg/s avg/overall.
 * Returns 1 for "Final:", 0 for a per-second report, -1 for none. */
static int parse(const char *out, double v[8])
{
	int found = -1;
	for (const char *line = out; line && *line;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char b[512];
		if (len < sizeof(b)) {
			memcpy(b, line, len);
			b[len] = 0;
			const char *p = b;
			bool fin = false;
			while (*p == ' ')
				p++;
			if (!strncmp(p, "Final:", 6)) {
				p += 6;
				fin = true;
			}
			double t[8];
			int used = 0;
			if (sscanf(p, "%lf %lf %lf %lf %lf %lf %lf %lf %n", &t[0], &t[1], &t[2], &t[3],
				   &t[4], &t[5], &t[6], &t[7], &used) == 8 && p[used] == 0) {
				memcpy(v, t, sizeof(t));
				found = fin;
			}
		}
		line = nl ? nl + 1 : NULL;
	}
	return found;
}

static double est_bps[2] = {300e6, 10e9}; /* tcp, shm: refined by every run */

int ucx_run(struct ctl *ctl, const char *host, const char *provider, const char *nic,
	    const struct bench_case *c, double seconds, struct ucx_result *out)
{
	memset(out, 0, sizeof(*out));
	out->gbps = out->mops = out->p50_us = NAN;
	const char *tls = strstr(provider, "tcp") ? "tcp" : strstr(provider, "shm") ? "posix,self" : NULL;
	if (!tls) {
		snprintf(out->note, sizeof(out->note), "no UCX transport for %s", provider);
		return -ENOTSUP;
	}
	if (!ucx_available()) {
		snprintf(out->note, sizeof(out->note), "%s not installed (apt-get install ucx-utils)", PERFTEST);
		return -ENOENT;
	}
	int k = strcmp(tls, "tcp") ? 1 : 0;
	bool lat = c->op == OP_IMM || c->op == OP_SEND;
	const char *test = c->op == OP_IMM ? "ucp_put_lat" : c->op == OP_SEND ? "tag_lat" : "ucp_put_bw";
	uint64_t size = c->op == OP_IMM ? 8 : c->op == OP_PAGED ? c->bytes : c->bytes;
	double rate = lat ? 20000.0 : est_bps[k] / (double)size;
	if (rate > 2e6)
		rate = 2e6;
	uint64_t n = (uint64_t)(rate * seconds);
	n = n < 3 ? 3 : n > 10000000 ? 10000000 : n;
	uint64_t w = n / 10 ? n / 10 : 1;

	struct ctl_ucx req = {0};
	snprintf(req.tls, sizeof(req.tls), "%s", tls);
	struct ctl_result res = {0};
	int ret = ctl_send(ctl, MSG_UCX_START, &req, sizeof(req));
	if (!ret)
		ret = ctl_expect(ctl, MSG_RESULT, &res, sizeof(res), NULL, 30000);
	if (ret || res.status) {
		snprintf(out->note, sizeof(out->note), "server did not start: %s",
			 strerror(-(ret ? ret : res.status)));
		return ret ? ret : res.status;
	}
	res.msg[sizeof(res.msg) - 1] = 0;
	char sz[32], ns[32], ws[32], hostc[256];
	snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
	snprintf(ns, sizeof(ns), "%llu", (unsigned long long)n);
	snprintf(ws, sizeof(ws), "%llu", (unsigned long long)w);
	snprintf(hostc, sizeof(hostc), "%s", host);
	char *argv[] = {PERFTEST, hostc, "-p", res.msg, "-t", (char *)test, "-s", sz, "-n", ns,
			"-w", ws, NULL};
	int fd;
	pid_t pid = spawn(argv, tls, nic, &fd);
	static char buf[1 << 16];
	int st = pid < 0 ? -errno : collect(pid, fd, buf, sizeof(buf),
					     bench_now_ns() + (uint64_t)((3 * seconds + 3) * 1e9));
	ret = ctl_send(ctl, MSG_UCX_WAIT, NULL, 0);
	if (!ret)
		ret = ctl_expect(ctl, MSG_RESULT, &res, sizeof(res), NULL, 30000);
	double v[8];
	int fin = pid < 0 ? -1 : parse(buf, v);
	if (fin < 0 || v[0] <= 0) {
		if (st == -ETIMEDOUT)
			snprintf(out->note, sizeof(out->note), "too slow: no report in %.0f s",
				 3 * seconds + 3);
		else
			snprintf(out->note, sizeof(out->note), "no figures (exit %d)", st);
		return ret ? ret : -EIO;
	}
	out->iters = (uint64_t)v[0];
	out->mops = v[7] / 1e6;
	/* UCX's MB is 2^20 bytes. */
	out->gbps = lat ? out->mops * 1e6 * (double)size * 8 / 1e9 : v[5] * 1048576.0 * 8 / 1e9;
	if (lat)
		out->p50_us = v[1]; /* already half a round trip */
	if (!lat && v[5] > 0)
		est_bps[k] = v[5] * 1048576.0;
	if (!fin)
		snprintf(out->note, sizeof(out->note), "killed after %.0f s; last report",
			 3 * seconds + 3);
	return ret;
}
