#ifndef XFER_FAULT_CASES_H
#define XFER_FAULT_CASES_H

#include "harness.h"

extern const struct fault_case case_forged_key, case_stale_desc, case_revoke, case_dereg_busy,
	case_forged_bounce;
extern const struct fault_case case_cancel_paged, case_stop_in_flight, case_send_too_large,
	case_too_many_regions;
extern const struct fault_case case_kill_target, case_dead_peer, case_peer_restart;
extern const struct fault_case case_partition, case_concurrent_peers, case_dead_peer_credits;
extern const struct fault_case case_revoked_plain, case_dereged_plain, case_made_up_key, case_moved_base,
	case_refused_large, case_send_beyond_buffers, case_kill_scatter, case_dead_member;
extern const struct fault_case case_old_key_rereg, case_neighbour, case_address_only, case_internal_bufs,
	case_forged_sender;

#endif
