#include "core/bringup.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/loop.h"
#include "core/regions.h"
#include "core/rx.h"
#include "core/tx.h"
#include "util/log.h"
#include "wire/msg.h"

static int open_nics(xfer_engine_t *e)
{
	char *list = e->nics_req ? strdup(e->nics_req) : NULL, *save = NULL;
	const char *name = list ? strtok_r(list, ",", &save) : NULL;
	int ret = 0;
	if (e->nics_req && !list)
		return -ENOMEM;
	do {
		if (e->nnics == XFER_NIC_MAX) {
			ret = -E2BIG;
			break;
		}
		struct xfer_nic *nic = &e->nics[e->nnics];
		nic->index = e->nnics;
		nic->want_hmem = e->gpu_native;
		nic->no_wait = e->attr.busy_poll || e->attr.spin_us == XFER_SPIN_FOREVER;
		ret = e->ops.open(nic, e->provider_req, name);
		if (ret) {
			xerr("no usable NIC %s for provider %s: %s", name ? name : "(first)",
			     e->provider_req, xfer_strerror(ret));
			break;
		}
		/* All NICs of a group must speak the same provider. */
		if (e->nnics && strcmp(nic->provider, e->nics[0].provider) != 0) {
			e->ops.close(nic);
			ret = -XFER_EPROVIDER;
			break;
		}
		e->nnics++;
	} while (name && (name = strtok_r(NULL, ",", &save)));
	free(list);
	return ret;
}

static int reg_internal(xfer_engine_t *e, void *buf, size_t len, unsigned access, xfer_mr_t **out)
{
	xfer_mr_t *mr = xi_mr_alloc(e, buf, len, access);
	if (!mr)
		return -ENOMEM;
	int ret = xi_mr_register_on_nics(e, mr);
	if (ret) {
		free(mr);
		return ret;
	}
	*out = mr;
	return 0;
}

int xi_engine_bringup(xfer_engine_t *e, struct worker *w)
{
	int ret = open_nics(e);
	if (ret)
		return ret;
	e->recv_slots = e->attr.recv_count * e->nnics;
	for (unsigned n = 0; n < e->nnics; n++) {
		if (e->attr.recv_count > e->nics[n].rx_size)
			return -EINVAL;
	}
	ret = xi_worker_setup(w);
	if (ret)
		return ret;
	size_t recv_bytes = (size_t)e->recv_slots * e->slot_bytes;
	/* Three slots past SEND_BUFS hold the liveness PING, PONG and BYE, which
	 * never change. */
	size_t send_bytes = (size_t)(SEND_BUFS + 3) * e->slot_bytes;
	e->recv_bufs = aligned_alloc(4096, (recv_bytes + 4095) & ~(size_t)4095);
	e->send_bufs = aligned_alloc(4096, (send_bytes + 4095) & ~(size_t)4095);
	void *sink = aligned_alloc(64, SINK_BYTES);
	if (!e->recv_bufs || !e->send_bufs || !sink) {
		free(sink);
		return -ENOMEM;
	}
	memset(sink, 0, SINK_BYTES);
	xi_tx_write_probes(e);
	/* Peers write only into the sink (zero-length writes with an immediate);
	 * the bounce buffers are ours alone. The sink's bytes are never read. */
	if ((ret = reg_internal(e, sink, SINK_BYTES, NIC_MR_REMOTE_WRITE, &e->sink)))
		return free(sink), ret;
	if ((ret = reg_internal(e, e->recv_bufs, recv_bytes, NIC_MR_LOCAL, &e->recv_mr)))
		return ret;
	if ((ret = reg_internal(e, e->send_bufs, send_bytes, NIC_MR_LOCAL, &e->send_mr)))
		return ret;
	ret = xi_mpmc_init(&e->inbox, e->recv_slots, sizeof(uint32_t));
	if (!ret)
		ret = xi_mpmc_init(&e->repost, e->recv_slots, sizeof(uint32_t));
	if (ret)
		return ret;
	xi_rx_post_all(w);
	return 0;
}

static void release_internal(xfer_engine_t *e, xfer_mr_t **mr, bool free_buf)
{
	if (!*mr)
		return;
	xi_mr_release_on_nics(e, *mr);
	if (free_buf)
		free((*mr)->buf);
	free(*mr);
	*mr = NULL;
}

void xi_engine_teardown(xfer_engine_t *e)
{
	/* Endpoints first: a registration released under an open endpoint can
	 * still be the target of a receive or a peer's write in flight. */
	for (unsigned n = 0; n < e->nnics; n++)
		e->ops.shutdown(&e->nics[n]);
	xi_regions_release_all(e);
	release_internal(e, &e->sink, true);
	release_internal(e, &e->recv_mr, false);
	release_internal(e, &e->send_mr, false);
	for (unsigned n = 0; n < e->nnics; n++)
		e->ops.close(&e->nics[n]);
}

void xi_engine_free_buffers(xfer_engine_t *e)
{
	free(e->recv_bufs);
	free(e->send_bufs);
	e->recv_bufs = e->send_bufs = NULL;
}
