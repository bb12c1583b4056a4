/* Recovering rxm connections over verbs. When a verbs RC queue pair gets an
 * error completion (a write the target rejected: bad key, revoked or
 * deregistered region) both ends' queue pairs are in the error state for
 * good, but ofi_rxm 1.17 keeps the connection: nothing tells rdma_cm, every
 * later request on it is flushed (-FI_ECANCELED), SENDs wait for credits
 * that never return (-FI_EAGAIN), and the engine ends up declaring a live
 * peer dead. tcp;ofi_rxm drops and redials such connections by itself.
 *
 * So for verbs: a request that fails with an error of its own (not a flush)
 * marks its destination broken; new requests to it fail at once with
 * -ENOTCONN (the core suspects and probes the peer, the application
 * retries); once every request we had posted to it has completed (the
 * flushes come quickly: the queue pair is in the error state), the backend
 * makes rxm close the connection, and the next request dials a new one. The
 * peer's rxm sees rdma_cm's disconnect and drops its end too.
 *
 * How rxm is made to close one connection: with FI_AV_REMOVE_CLEANUP on
 * (ofi_open.c turns it on), its fi_av_remove runs the endpoint's remove
 * handler (close and free the peer's connection) for every removal, but
 * frees the address only when its use count drops to zero, and inserting an address that is already there returns the same
 * fi_addr with the count raised. Insert again, then remove once: the
 * connection goes, the fi_addr stays valid (libfabric 1.17, prov/rxm/src/
 * rxm_av.c and prov/util/src/util_av.c). Waiting for our requests first
 * matters: rxm closes the verbs endpoint at once, and a device that drops
 * the completions of a destroyed queue pair (mlx5 does) would never
 * complete them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <rdma/fi_domain.h>

#include "util/log.h"
#include "backend/ofi/ofi.h"

/* Where a request's destination is kept in its context: the last 8 bytes,
 * which the provider does not use when it asks for no FI_CONTEXT2. */
#define DEST_OFF (NIC_CTX_BYTES - sizeof(uint64_t))

/* Whether libfabric was told to close connections on removal (its own
 * boolean parser takes these words; it read the variable at init, which
 * ofi_open.c set before it unless the user had). */
static bool cleanup_on(void)
{
	const char *v = getenv("FI_AV_REMOVE_CLEANUP");
	if (!v)
		return false;
	return !strcmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "true") || !strcasecmp(v, "yes");
}

bool xi_ofi_conn_tracking(const struct fi_info *fi)
{
	return strstr(fi->fabric_attr->prov_name, "verbs") && !(fi->mode & FI_CONTEXT2) && cleanup_on();
}

int xi_ofi_conn_added(struct ofi_nic *o, uint64_t dest)
{
	if (!o->track)
		return 0;
	if (dest >= UINT32_MAX)
		return -ENOSPC;
	if (dest >= o->ndests) {
		uint32_t n = o->ndests ? o->ndests : 64;
		while (n <= dest)
			n *= 2;
		struct ofi_dest *d = realloc(o->dests, (size_t)n * sizeof(*d));
		if (!d)
			return -ENOMEM;
		memset(d + o->ndests, 0, (size_t)(n - o->ndests) * sizeof(*d));
		o->dests = d;
		o->ndests = n;
	}
	/* A slot reused by the address vector starts clean; what an earlier
	 * peer of that slot still had in flight keeps counting. */
	if (o->dests[dest].broken) {
		o->dests[dest].broken = false;
		o->nbroken--;
	}
	return 0;
}

void xi_ofi_conn_posted(struct ofi_nic *o, uint64_t dest, void *ctx)
{
	uint64_t tag = dest + 1;
	memcpy((uint8_t *)ctx + DEST_OFF, &tag, sizeof(tag));
	o->dests[dest].inflight++;
}

void xi_ofi_conn_done(struct xfer_nic *nic, struct ofi_nic *o, void *ctx, bool own_error)
{
	uint64_t tag;
	memcpy(&tag, (const uint8_t *)ctx + DEST_OFF, sizeof(tag));
	if (!tag || tag > o->ndests)
		return;
	struct ofi_dest *d = &o->dests[tag - 1];
	if (d->inflight)
		d->inflight--;
	if (own_error && !d->broken) {
		d->broken = true;
		o->nbroken++;
		xinfo("connection to fi_addr %llu on %s failed: resetting it once its requests completed",
		      (unsigned long long)(tag - 1), nic->domain);
	}
}

/* Makes rxm drop its connection to dest (see the top of the file). */
static void reset(struct xfer_nic *nic, struct ofi_nic *o, fi_addr_t dest)
{
	uint8_t addr[256];
	size_t len = sizeof(addr);
	fi_addr_t again = FI_ADDR_NOTAVAIL;
	int ret = fi_av_lookup(o->av, dest, addr, &len);
	if (!ret && len > sizeof(addr))
		ret = -FI_ETOOSMALL;
	if (!ret)
		ret = fi_av_insert(o->av, addr, 1, &again, 0, NULL) == 1 ? 0 : -FI_EINVAL;
	if (!ret && again != dest) {
		/* Not the libfabric this was written against: undo, and leave the
		 * connection as rxm keeps it. */
		fi_av_remove(o->av, &again, 1, 0);
		xwarn("resetting the connection to fi_addr %llu on %s: the provider gave a new address "
		      "(%llu); not resetting", (unsigned long long)dest, nic->domain, (unsigned long long)again);
		o->track = false;
		return;
	}
	if (!ret)
		ret = fi_av_remove(o->av, &dest, 1, 0);
	if (ret)
		xwarn("resetting the connection to fi_addr %llu on %s failed: %s", (unsigned long long)dest,
		      nic->domain, fi_strerror(-ret));
	else
		xdbg("connection to fi_addr %llu on %s closed; the next request redials",
		     (unsigned long long)dest, nic->domain);
}

void xi_ofi_conn_reset_idle(struct xfer_nic *nic, struct ofi_nic *o)
{
	for (uint32_t i = 0; i < o->ndests && o->nbroken; i++) {
		struct ofi_dest *d = &o->dests[i];
		if (!d->broken || d->inflight)
			continue;
		d->broken = false;
		o->nbroken--;
		reset(nic, o, i);
		if (!o->track)
			return;
	}
}

/* The work-completion status the verbs provider passes up as prov_errno
 * (enum ibv_wc_status: fixed by the verbs ABI; rdma-core's headers are not
 * needed to build this backend). The same mapping as the raw backend's
 * (backend/ibv/ibv_errno.c), so that both RDMA paths report alike. */
int xi_ofi_verbs_errno(int prov_errno, int fallback)
{
	switch (prov_errno) {
	case 1:  /* LOC_LEN_ERR */
	case 9:  /* REM_INV_REQ_ERR */
		return -EMSGSIZE;
	case 4:  /* LOC_PROT_ERR */
	case 6:  /* MW_BIND_ERR */
		return -EFAULT;
	case 5:  /* WR_FLUSH_ERR: the queue pair failed for another request */
		return -ECONNRESET;
	case 10: /* REM_ACCESS_ERR: bad key, outside the region, revoked */
		return -EACCES;
	case 11: /* REM_OP_ERR */
		return -EREMOTEIO;
	case 12: /* RETRY_EXC_ERR */
	case 20: /* RESP_TIMEOUT_ERR */
		return -EHOSTUNREACH;
	case 13: /* RNR_RETRY_EXC_ERR */
		return -ECONNREFUSED;
	case 16: /* REM_ABORT_ERR */
		return -ECONNABORTED;
	default:
		return fallback;
	}
}
