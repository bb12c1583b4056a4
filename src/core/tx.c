#include "core/tx.h"

#include <errno.h>
#include <stdlib.h>

#include "core/telemetry.h"
#include "util/sys.h"
#include "wire/msg.h"

/* Probe credits per NIC: one outstanding PING per peer is the common case,
 * a handful covers the peers probed at once; data keeps the rest. */
#define PROBE_CREDITS 8u

/* XFER_TX_BYTES=N[K|M|G]: an experiment for issue 15 (off by default). On
 * tcp;ofi_rxm a window of 64 KiB writes handed to the provider at once
 * queued inside it, and some process pairs then ran 0.71-0.92x the raw loop
 * (docs/performance.md, session 9). Measured on 16 idle cores (session
 * 10): a cap of 16 requests (XFER_OFI_TX_DEPTH) made 64 KiB writes
 * 1.07-1.11x but 4 KiB pages 0.62-0.76x; this cap at 256 KiB 64 KiB writes
 * 0.96-1.08x and pages 0.57-0.78x, at 1 MiB 0.92-1.02x and 0.74-1.24x.
 * Pages want many requests in flight, 64 KiB writes few: with
 * XFER_TX_BYTES_MIN_LEN=L writes shorter than L bytes (pages) are neither
 * held nor counted, so the cap holds back only the large ones (not
 * measured yet). A floor in requests instead would not separate them:
 * xfer-bench keeps 64 single writes in flight, as many as a few pages. */
static uint64_t tx_env(const char *name)
{
	const char *v = getenv(name);
	char *end;
	if (!v || !*v)
		return 0;
	uint64_t x = xi_parse_bytes(v, &end);
	return *end ? 0 : x; /* not a byte count: off */
}

int xi_tx_init(struct worker *w)
{
	const xfer_engine_t *e = w->e;
	struct tx_state *t = &w->tx;
	uint32_t nwr = 0;
	t->reserve = PROBE_CREDITS;
	for (unsigned n = 0; n < e->nnics; n++) {
		t->credits[n] = e->nics[n].tx_size;
		nwr += e->nics[n].tx_size;
		/* A tiny transmit queue still lets data through. */
		if (t->reserve > e->nics[n].tx_size / 8)
			t->reserve = e->nics[n].tx_size / 8;
	}
	t->wr_reserve = t->reserve * e->nnics;
	t->wbytes_max = tx_env("XFER_TX_BYTES");
	t->wbytes_min_len = tx_env("XFER_TX_BYTES_MIN_LEN");
	t->wrs = calloc(nwr, sizeof(*t->wrs));
	t->free_send = calloc(SEND_BUFS, sizeof(*t->free_send));
	if (!t->wrs || !t->free_send)
		return -ENOMEM;
	for (uint32_t i = nwr; i-- > 0;)
		xi_tx_wr_put(w, &t->wrs[i]);
	for (uint32_t i = 0; i < SEND_BUFS; i++)
		t->free_send[t->nfree_send++] = i;
	return 0;
}

void xi_tx_free(struct worker *w)
{
	free(w->tx.wrs);
	free(w->tx.free_send);
	w->tx.wrs = NULL;
	w->tx.free_send = NULL;
}

uint8_t *xi_tx_buf(struct worker *w, uint32_t *b)
{
	if (!w->tx.nfree_send)
		return NULL;
	*b = w->tx.free_send[--w->tx.nfree_send];
	return w->e->send_bufs + (size_t)*b * w->e->slot_bytes;
}

void xi_tx_buf_put(struct worker *w, uint32_t b)
{
	w->tx.free_send[w->tx.nfree_send++] = b;
}

int xi_tx_write(struct worker *w, unsigned n, const struct nic_write *nw, struct wr *wr)
{
	xfer_engine_t *e = w->e;
	struct tx_state *t = &w->tx;
	const bool counted = t->wbytes_max && nw->len >= t->wbytes_min_len;
	if (counted && t->wbytes[n] && t->wbytes[n] + nw->len > t->wbytes_max)
		return -EAGAIN; /* later, when writes in the provider complete */
	int ret = e->ops.post_write(&e->nics[n], nw, wr);
	if (ret) {
		if (ret == -EAGAIN)
			xi_tel_nic(w->tel, n, TN_RETRIES, 1);
		return ret;
	}
	wr->wlen = !counted ? 0 : (uint32_t)(nw->len < UINT32_MAX ? nw->len : UINT32_MAX);
	t->wbytes[n] += wr->wlen;
	w->tx.credits[n]--;
	xi_stat_own_add(&e->st.wrs_posted, 1);
	xi_stat_own_add(&e->st.bytes_written, nw->len);
	xi_tel_nic_write(w->tel, n, nw->len);
	return 0;
}

int xi_tx_send(struct worker *w, unsigned n, uint64_t dest, uint32_t b, size_t len, struct wr *wr)
{
	xfer_engine_t *e = w->e;
	uint8_t *buf = e->send_bufs + (size_t)b * e->slot_bytes;
	int ret = e->ops.post_send(&e->nics[n], dest, buf, len, e->send_mr->nic[n].desc, wr);
	if (ret) {
		if (ret == -EAGAIN)
			xi_tel_nic(w->tel, n, TN_RETRIES, 1);
		xi_tx_buf_put(w, b);
		return ret;
	}
	wr->sendbuf = b;
	w->tx.credits[n]--;
	wr->wlen = 0; /* a SEND: no write bytes to count */
	xi_stat_own_add(&e->st.wrs_posted, 1);
	xi_tel_nic_send(w->tel, n, len);
	return 0;
}

int xi_tx_probe(struct worker *w, unsigned n, uint64_t dest, enum tx_probe which, uint8_t kind,
		uint32_t slot)
{
	xfer_engine_t *e = w->e;
	if (!xi_tx_ready(w, n, TX_PROBE))
		return -ENOBUFS;
	struct wr *wr = xi_tx_wr(w, TX_PROBE);
	if (!wr)
		return -ENOBUFS;
	wr->op = NULL;
	wr->kind = kind;
	wr->slot = slot;
	wr->nic = (uint8_t)n;
	const uint8_t *msg = e->send_bufs + (size_t)(SEND_BUFS + which) * e->slot_bytes;
	int ret = e->ops.post_send(&e->nics[n], dest, msg, XI_MSG_HDR, e->send_mr->nic[n].desc, wr);
	if (ret) {
		if (ret == -EAGAIN)
			xi_tel_nic(w->tel, n, TN_RETRIES, 1);
		xi_tx_wr_put(w, wr);
		return ret;
	}
	w->tx.credits[n]--;
	wr->wlen = 0; /* a SEND: no write bytes to count */
	xi_tel_nic(w->tel, n, TN_PROBES, 1);
	return 0;
}

void xi_tx_complete(struct worker *w, struct wr *wr)
{
	w->tx.credits[wr->nic]++;
	w->tx.wbytes[wr->nic] -= wr->wlen;
	wr->wlen = 0;
	if (wr->sendbuf != UINT32_MAX) {
		xi_tx_buf_put(w, wr->sendbuf);
		wr->sendbuf = UINT32_MAX;
	}
}

void xi_tx_write_probes(xfer_engine_t *e)
{
	static const uint32_t magic[] = {[TX_PING] = XI_MSG_PING, [TX_PONG] = XI_MSG_PONG,
					 [TX_BYE] = XI_MSG_BYE};
	for (unsigned i = 0; i < 3; i++)
		xi_msg_put_hdr(e->send_bufs + (size_t)(SEND_BUFS + i) * e->slot_bytes, magic[i], 0, e->id);
}
