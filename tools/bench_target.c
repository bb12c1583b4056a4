/* The target: opens what the initiator asks for, then serves one case at a
 * time until BYE. It measures nothing itself; it keeps memory registered,
 * counts immediates, answers pings and checks bytes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench_impl.h"
#include "bench_opts.h"
#include "bench_target.h"
#include "xfer.h"

/* A case for an implementation this side lacks: fail it, stay in step. */
static void refuse_case(struct ctl *ctl)
{
	struct ctl_end end;
	if (!ctl_send(ctl, MSG_READY, NULL, 0) && !case_wait_end(ctl, &end))
		case_reply(ctl, -ENODEV, 0, "not available on the target");
}

int target_main(const struct bench_opts *o, struct ctl *ctl)
{
	struct ctl_hello h;
	int ret = ctl_expect(ctl, MSG_HELLO, &h, sizeof(h), NULL, 60000);
	if (ret || h.magic != CTL_MAGIC || h.version != CTL_VERSION) {
		fprintf(stderr, "xfer-bench: target: no usable hello from the initiator\n");
		return 1;
	}
	h.provider[sizeof(h.provider) - 1] = h.nics[sizeof(h.nics) - 1] = 0;
	/* Our own --provider/--nics win (NIC names differ between hosts);
	 * otherwise the initiator's. */
	const char *provider = o->provider ? opts_provider(o) : h.provider;
	const char *nics = o->provider || o->nics ? opts_nics(o) : (h.nics[0] ? h.nics : NULL);
	struct xside *x = NULL;
	struct rside *r = NULL;
	/* Our own --cpu-pin/--busy-poll win, as the provider does. */
	int worker_cpu = o->cpu_pin || h.cpu_pin ? bench_layout(PIN_TARGET, o->listen != NULL) : -1;
	int busy = o->busy_poll_set ? (int)o->busy_poll : h.busy_poll;
	ret = xside_open(&x, provider, nics, worker_cpu, busy);
	struct ctl_hello reply = {.magic = CTL_MAGIC, .version = CTL_VERSION, .status = ret};
	if (!ret)
		snprintf(reply.provider, sizeof(reply.provider), "%s", xside_provider(x));
	else
		fprintf(stderr, "xfer-bench: target: provider %s%s%s: %s\n", provider, nics ? " on " : "",
			nics ? nics : "", xfer_strerror(ret));
	if (ctl_send(ctl, MSG_HELLO, &reply, sizeof(reply)) || ret)
		goto out;
	if ((ret = xside_connect(x, ctl)))
		goto out;
	if (o->listen) /* forked targets stay quiet: the table is the output */
		fprintf(stderr, "xfer-bench: target: serving on %s %s\n", xside_provider(x),
			nics ? nics : "(first NIC)");
	if (h.impls & (1u << IMPL_RAW)) {
		const char *names[4];
		unsigned n = xside_nic_count(x);
		for (unsigned i = 0; i < n && i < 4; i++)
			names[i] = xside_nic(x, i);
		if (rside_open(&r, xside_provider(x), names, n < 4 ? n : 4,
			       !h.raw_transmit && xside_delivery_complete(x)))
			r = NULL;
		if ((ret = raw_handshake(r, ctl)))
			r = raw_drop(r);
	}
	for (;;) {
		union {
			struct bench_case c;
			struct ctl_ucx u;
		} m;
		uint32_t type, len;
		if ((ret = ctl_recv(ctl, &type, &m, sizeof(m), &len, -1))) {
			fprintf(stderr, "xfer-bench: target: the initiator went away\n");
			break;
		}
		if (type == MSG_BYE) {
			if (o->listen)
				fprintf(stderr, "xfer-bench: target: done\n");
			break;
		}
		if (type == MSG_CASE && len == sizeof(m.c)) {
			/* A failed case is the initiator's to report; keep serving. */
			if (m.c.impl == IMPL_RAW && r) {
				struct pin_state pin = {0};
				if (h.raw_pin)
					raw_pin(&pin, PIN_TARGET);
				raw_target_case(r, ctl, &m.c);
				raw_unpin(&pin);
			}
			else if (m.c.impl == IMPL_XFER)
				xfer_target_case(x, ctl, &m.c);
			else
				refuse_case(ctl);
		} else if (type == MSG_UCX_START && len == sizeof(m.u)) {
			ucx_serve(ctl, &m.u, xside_nic(x, 0));
		} else if (type == MSG_UCX_WAIT) {
			ucx_serve_wait(ctl);
		} else {
			fprintf(stderr, "xfer-bench: target: unexpected message %u\n", type);
			ret = -EPROTO;
			break;
		}
	}
out:
	xside_disconnect(x);
	rside_close(r);
	xside_close(x);
	return ret ? 1 : 0;
}

int raw_handshake(struct rside *r, struct ctl *ctl)
{
	if (r)
		return rside_connect(r, ctl);
	/* Tell the peer, which is waiting for our names, that we have none. */
	uint8_t buf[4096];
	uint32_t len;
	int ret = ctl_send(ctl, MSG_RAWADDR, NULL, 0);
	if (!ret)
		ret = ctl_expect(ctl, MSG_RAWADDR, buf, sizeof(buf), &len, 60000);
	return ret ? ret : -ENODEV;
}

struct rside *raw_drop(struct rside *r)
{
	fprintf(stderr, "xfer-bench: the raw libfabric baseline is unavailable on one side; "
			"continuing without it\n");
	rside_close(r);
	return NULL;
}
