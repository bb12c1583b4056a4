/* Work-completion statuses as the errno values the core understands. The
 * connection-type codes (ECONNRESET, EHOSTUNREACH, ECONNABORTED) make the
 * core suspect the peer and probe it (src/liveness.c); a rejected key is
 * EACCES, the writer's own mistake, not a peer failure. */
#include <errno.h>

#include "backend/ibv/ibv_nic.h"

int xi_ibv_wc_errno(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_WR_FLUSH_ERR: /* the QP failed for another request: this one never ran */
		return -ECONNRESET;
	case IBV_WC_RETRY_EXC_ERR: /* no ACK after every retry: the peer is gone or unreachable */
	case IBV_WC_RESP_TIMEOUT_ERR:
		return -EHOSTUNREACH;
	case IBV_WC_RNR_RETRY_EXC_ERR: /* the peer posts no receives (cannot happen with rnr_retry 7) */
		return -ECONNREFUSED;
	case IBV_WC_REM_ACCESS_ERR: /* bad rkey, or outside the region, or not writable */
		return -EACCES;
	case IBV_WC_REM_INV_REQ_ERR: /* e.g. a SEND larger than the peer's receive buffer */
	case IBV_WC_LOC_LEN_ERR:
		return -EMSGSIZE;
	case IBV_WC_LOC_PROT_ERR: /* our lkey does not cover the buffer */
	case IBV_WC_MW_BIND_ERR:
		return -EFAULT;
	case IBV_WC_REM_ABORT_ERR:
		return -ECONNABORTED;
	case IBV_WC_REM_OP_ERR:
		return -EREMOTEIO;
	default: /* LOC_QP_OP, LOC_EEC_OP, BAD_RESP, FATAL, GENERAL, ... */
		return -EIO;
	}
}
