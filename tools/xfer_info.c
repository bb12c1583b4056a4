/* xfer-info: what the engine finds and would use here, like fi_info or
 * ucx_info: providers, the NICs of a domain group and their properties, the
 * machine's GPUs and NICs with their NUMA nodes, and which NICs go with which
 * GPU. */
#include <stdio.h>
#include <string.h>

#include "xfer.h"

static void engine_info(struct xfer_attr *a)
{
	xfer_engine_t *e;
	int rc = xfer_engine_create(a, &e);
	if (rc) {
		printf("  %-12s not available: %s\n", a->provider, xfer_strerror(rc));
		return;
	}
	printf("  %-12s engine %016llx, %u NIC(s)\n", xfer_engine_provider(e),
	       (unsigned long long)xfer_engine_id(e), xfer_engine_nic_count(e));
	for (unsigned i = 0; i < xfer_engine_nic_count(e); i++) {
		struct xfer_nic_info ni;
		xfer_engine_nic_info(e, i, &ni);
		printf("    nic %u: %-8s tx %u rx %u, max msg %llu, %s completion, GPU memory %s\n", i,
		       ni.domain, ni.tx_depth, ni.rx_depth, (unsigned long long)ni.max_msg,
		       ni.delivery_complete ? "delivery" : "transmit", ni.gpu_path);
	}
	uint8_t addr[XFER_ADDR_MAX];
	printf("    address: %d bytes\n", xfer_engine_addr(e, addr, sizeof(addr), NULL));
	xfer_engine_destroy(e);
}

int main(int argc, char **argv)
{
	struct xfer_attr a;
	xfer_attr_init(&a);
	int explicit_provider = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--provider") && i + 1 < argc) {
			a.provider = argv[++i];
			explicit_provider = 1;
		} else if (!strcmp(argv[i], "--nics") && i + 1 < argc) {
			a.nics = argv[++i];
		} else {
			fprintf(stderr, "usage: %s [--provider NAME] [--nics LIST]\n", argv[0]);
			return 2;
		}
	}
	printf("xfer %d.%d\n\nconfiguration (defaults + XFER_* environment):\n", XFER_VERSION_MAJOR,
	       XFER_VERSION_MINOR);
	printf("  provider %s, nics %s, worker cpu %d, spin %u us\n", a.provider, a.nics ? a.nics : "(first)",
	       a.worker_cpu, a.spin_us);
	printf("  submit depth %u, max ops %u, recv %u x %u B, imm slots %u, regions %u\n",
	       a.submit_depth, a.max_ops, a.recv_count, a.msg_max, a.imm_slots, a.max_regions);
	printf("  timeout %llu ms, heartbeat %u ms x %u\n", (unsigned long long)a.timeout_ms,
	       a.heartbeat_ms, a.heartbeat_misses);

	printf("\nproviders:\n");
	if (explicit_provider) {
		engine_info(&a);
	} else {
		static const char *names[] = {"efa", "verbs", "tcp", "shm", "ofi-shm"};
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			struct xfer_attr p = a;
			p.provider = names[i];
			p.log_level = -1;
			if (!strcmp(names[i], "tcp") && !p.nics)
				p.nics = "lo"; /* enumerate without touching an external NIC */
			engine_info(&p);
		}
	}

	printf("\ntopology:\n");
	struct xfer_topo_dev devs[64];
	int n = xfer_topology(devs, 64);
	if (n < 0) {
		printf("  unavailable: %s\n", xfer_strerror(n));
		return 0;
	}
	int gpus = 0;
	for (int i = 0; i < n && i < 64; i++) {
		printf("  %-4s %-12s pci %-13s numa %d\n", devs[i].kind == XFER_DEV_GPU ? "gpu" : "nic",
		       devs[i].name, devs[i].pci[0] ? devs[i].pci : "-", devs[i].numa);
		gpus += devs[i].kind == XFER_DEV_GPU;
	}
	for (int g = 0; g < gpus; g++) {
		char nics[256];
		int k = xfer_topology_nics_for_gpu(g, nics, sizeof(nics));
		printf("  domain group for gpu%d: %s\n", g, k > 0 ? nics : "(no NIC)");
	}
	if (!gpus)
		printf("  no GPU found: one domain group with the NICs named in --nics\n");
	return 0;
}
