/* xfer-info's model: what it found, filled by info_probe.c, printed as text
 * or JSON by info_print.c. */
#ifndef XFER_INFO_H
#define XFER_INFO_H

#include <stdio.h>

#include "xfer.h"

#define INFO_NIC_MAX 4
#define INFO_DEV_MAX 64

struct info_nic {
	char domain[64];
	unsigned tx_depth, rx_depth;
	unsigned long long max_msg;
	int delivery_complete;
	char gpu_path[16];
};

/* One engine creation: what was asked and what came of it. */
struct info_engine {
	const char *provider; /* as asked: "auto", "tcp", a full name, ... */
	const char *nics;     /* as asked; NULL: the provider's first NIC */
	int rc;               /* 0, or xfer_engine_create's error */
	char chosen[64];      /* xfer_engine_provider(), e.g. "tcp;ofi_rxm" */
	unsigned nic_count;
	struct info_nic nic[INFO_NIC_MAX];
	int addr_len;
};

/* the providers info_probe tries, one engine each (info_probe.c's list) */
#define INFO_PROVIDER_MAX 8

struct info {
	struct xfer_attr attr;       /* defaults + environment + options */
	struct info_engine selected; /* exactly what an engine gets with attr */
	struct info_engine providers[INFO_PROVIDER_MAX];
	int nproviders;
	struct xfer_topo_dev devs[INFO_DEV_MAX];
	int ndevs;                    /* or xfer_topology's error */
	char gpu_nics[INFO_DEV_MAX][256]; /* per GPU: its domain group, "" if none */
	int ngpus;
};

/* Creates the engines and reads the topology; never fails as a whole. */
void info_probe(struct info *in);
void info_print_text(const struct info *in, FILE *f);
void info_print_json(const struct info *in, FILE *f);

#endif
