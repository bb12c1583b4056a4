/* Fills struct info by doing what an application would: create an engine
 * with the configuration in effect (the selected one, exactly as
 * xfer_engine_create would be called), one per known provider with its
 * first NIC, and read the topology. */
#include <stdio.h>
#include <string.h>

#include "info.h"

static void probe(struct info_engine *out, const struct xfer_attr *attr)
{
	out->provider = attr->provider;
	out->nics = attr->nics;
	xfer_engine_t *e;
	out->rc = xfer_engine_create(attr, &e);
	if (out->rc)
		return;
	snprintf(out->chosen, sizeof(out->chosen), "%s", xfer_engine_provider(e));
	out->nic_count = xfer_engine_nic_count(e);
	for (unsigned i = 0; i < out->nic_count && i < INFO_NIC_MAX; i++) {
		struct xfer_nic_info ni;
		struct info_nic *n = &out->nic[i];
		if (xfer_engine_nic_info(e, i, &ni))
			continue;
		snprintf(n->domain, sizeof(n->domain), "%s", ni.domain);
		n->tx_depth = ni.tx_depth;
		n->rx_depth = ni.rx_depth;
		n->max_msg = (unsigned long long)ni.max_msg;
		n->delivery_complete = ni.delivery_complete;
		snprintf(n->gpu_path, sizeof(n->gpu_path), "%s", ni.gpu_path ? ni.gpu_path : "-");
	}
	uint8_t addr[XFER_ADDR_MAX];
	out->addr_len = xfer_engine_addr(e, addr, sizeof(addr), NULL);
	xfer_engine_destroy(e);
}

void info_probe(struct info *in)
{
	probe(&in->selected, &in->attr);

	/* Availability of each provider on its own first NIC, quietly: a missing
	 * provider is an answer here, not a warning. */
	static const char *const names[] = {"efa", "verbs", "tcp", "shm", "ofi-shm"};
	_Static_assert(sizeof(names) / sizeof(names[0]) <= INFO_PROVIDER_MAX, "info.providers too small");
	in->nproviders = (int)(sizeof(names) / sizeof(names[0]));
	for (int i = 0; i < in->nproviders; i++) {
		struct xfer_attr p = in->attr;
		p.provider = names[i];
		p.nics = NULL;
		p.log_level = -1;
		probe(&in->providers[i], &p);
	}

	in->ndevs = xfer_topology(in->devs, INFO_DEV_MAX);
	in->ngpus = 0;
	for (int i = 0; i < in->ndevs && i < INFO_DEV_MAX; i++)
		in->ngpus += in->devs[i].kind == XFER_DEV_GPU;
	for (int g = 0; g < in->ngpus; g++)
		if (xfer_topology_nics_for_gpu(g, in->gpu_nics[g], sizeof(in->gpu_nics[g])) <= 0)
			in->gpu_nics[g][0] = 0;
}
