/* The fault suite: `faults CASE` runs one case (ctest runs each on every
 * provider); `faults --list` names them. */
#include <string.h>

#include "cases.h"

static const struct fault_case *const cases[] = {
	&case_forged_key,     &case_stale_desc,	       &case_revoke,	      &case_dereg_busy,
	&case_cancel_paged,   &case_stop_in_flight,    &case_send_too_large, &case_too_many_regions,
	&case_kill_target,    &case_dead_peer,	       &case_peer_restart,   &case_partition,
	&case_concurrent_peers, &case_dead_peer_credits, &case_forged_bounce,
};

int main(int argc, char **argv)
{
	size_t n = sizeof(cases) / sizeof(cases[0]);
	if (argc == 2 && !strcmp(argv[1], "--list")) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", cases[i]->name);
		return 0;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: %s CASE | --list\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < n; i++)
		if (!strcmp(cases[i]->name, argv[1]))
			return fault_run(cases[i]);
	fprintf(stderr, "no case %s\n", argv[1]);
	return 2;
}
