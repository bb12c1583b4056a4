/* The fault suite: `faults CASE` runs one case (ctest runs each on every
 * provider); `faults --repeat N CASE` runs it N times, each run in a process
 * group of its own that must finish within a minute (a hang fails the run);
 * `faults --list` names them. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cases.h"

static const struct fault_case *const cases[] = {
	&case_forged_key,	 &case_stale_desc,	   &case_revoke,	    &case_dereg_busy,
	&case_cancel_paged,	 &case_stop_in_flight,	   &case_send_too_large,    &case_too_many_regions,
	&case_kill_target,	 &case_dead_peer,	   &case_peer_restart,	    &case_partition,
	&case_concurrent_peers,	 &case_dead_peer_credits,  &case_forged_bounce,	    &case_revoked_plain,
	&case_dereged_plain,	 &case_made_up_key,	   &case_moved_base,	    &case_refused_large,
	&case_send_beyond_buffers, &case_kill_scatter, &case_old_key_rereg, &case_neighbour,
	&case_address_only,	 &case_internal_bufs,	   &case_forged_sender, &case_dead_member,
};

#define RUN_LIMIT_S 60

/* One run in a child process group; its exit code, or 1 after a hang. */
static int run_isolated(const struct fault_case *c, int i)
{
	uint64_t start = mono_ns();
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		setpgid(0, 0);
		_exit(fault_run(c));
	}
	setpgid(pid, pid);
	int status = 0;
	for (;;) {
		pid_t got = waitpid(pid, &status, WNOHANG);
		if (got == pid)
			break;
		if (ms_since(start) > RUN_LIMIT_S * 1000ull) {
			fprintf(stderr, "run %d of %s: HANG after %d s\n", i, c->name, RUN_LIMIT_S);
			kill(-pid, SIGKILL);
			waitpid(pid, &status, 0);
			return 1;
		}
		usleep(10000);
	}
	int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	fprintf(stderr, "run %d of %s: %s in %llu ms\n", i, c->name, rc == 0 ? "ok" : rc == 77 ? "skipped" : "FAILED",
		(unsigned long long)ms_since(start));
	return rc;
}

int main(int argc, char **argv)
{
	size_t n = sizeof(cases) / sizeof(cases[0]);
	int repeat = 0;
	if (argc == 2 && !strcmp(argv[1], "--list")) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", cases[i]->name);
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "--repeat")) {
		repeat = atoi(argv[2]);
		argv += 2;
		argc -= 2;
	}
	if (argc != 2 || repeat < 0) {
		fprintf(stderr, "usage: %s [--repeat N] CASE | --list\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < n; i++) {
		if (strcmp(cases[i]->name, argv[1]))
			continue;
		if (!repeat)
			return fault_run(cases[i]);
		for (int k = 1; k <= repeat; k++) {
			int rc = run_isolated(cases[i], k);
			if (rc)
				return rc;
		}
		return 0;
	}
	fprintf(stderr, "no case %s\n", argv[1]);
	return 2;
}
