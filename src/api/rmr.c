/* Remote regions: importing a peer's descriptor, checked against the peer
 * it names, and releasing it (with the CUDA IPC mapping the worker may have
 * opened for it). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/objects.h"
#include "gpu/gpu_copy.h"

int xfer_rmr_import(xfer_engine_t *e, xfer_peer_t peer, const void *desc, size_t len,
		    xfer_rmr_t **out)
{
	struct wire_desc d;
	if (!e || (!desc && len) || !out)
		return -EINVAL;
	if (atomic_load(&e->stopping))
		return -ESHUTDOWN;
	uint64_t owner = xfer_peer_id(e, peer);
	if (!owner || xfer_peer_state(e, peer) != XFER_PEER_LIVE)
		return xfer_peer_state(e, peer) == XFER_PEER_DEAD ? -XFER_EPEER : -ENOENT;
	int ret = xi_wire_desc_decode(desc, len, &d);
	if (ret)
		return ret;
	if (d.engine_id != owner)
		return -XFER_EFOREIGN;
	if (d.nnics != e->peers[peer].nnics)
		return -XFER_EBADWIRE;
	xfer_rmr_t *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->e = e;
	r->peer = peer;
	r->engine_id = d.engine_id;
	r->len = d.len;
	r->nnics = d.nnics;
	memcpy(r->nic, d.nic, sizeof(r->nic));
	r->flags = d.flags;
	r->region_id = d.region_id;
	r->host_id = d.host_id;
	r->ipc_offset = d.ipc_offset;
	memcpy(r->ipc, d.ipc, sizeof(r->ipc));
	*out = r;
	return 0;
}

void xfer_rmr_free(xfer_rmr_t *rmr)
{
	if (!rmr)
		return;
	xi_gpu_ipc_close(rmr->ipc_ptr);
	free(rmr);
}

size_t xfer_rmr_len(const xfer_rmr_t *rmr)
{
	return rmr ? rmr->len : 0;
}
