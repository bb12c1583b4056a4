/* xfer-info: what the engine would use here, like fi_info or ucx_info. */
#include <stdio.h>
#include <string.h>

#include "xfer.h"

int main(int argc, char **argv)
{
	struct xfer_attr a;
	xfer_attr_init(&a);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--provider") && i + 1 < argc)
			a.provider = argv[++i];
		else if (!strcmp(argv[i], "--nics") && i + 1 < argc)
			a.nics = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--provider NAME] [--nics LIST]\n", argv[0]);
			return 2;
		}
	}
	xfer_engine_t *e;
	int rc = xfer_engine_create(&a, &e);
	if (rc) {
		fprintf(stderr, "xfer-info: cannot open provider %s: %s\n", a.provider, xfer_strerror(rc));
		return 1;
	}
	printf("xfer %d.%d\n", XFER_VERSION_MAJOR, XFER_VERSION_MINOR);
	printf("provider:      %s\n", xfer_engine_provider(e));
	printf("engine id:     %016llx\n", (unsigned long long)xfer_engine_id(e));
	for (unsigned i = 0; i < xfer_engine_nic_count(e); i++)
		printf("nic %u:         %s\n", i, xfer_engine_nic_name(e, i));
	printf("submit depth:  %u\nmax ops:       %u\nrecv buffers:  %u x %u B\n", a.submit_depth,
	       a.max_ops, a.recv_count, a.msg_max);
	printf("imm slots:     %u\nspin:          %u us\ntimeout:       %llu ms\n", a.imm_slots,
	       a.spin_us, (unsigned long long)a.timeout_ms);
	uint8_t addr[XFER_ADDR_MAX];
	int len = xfer_engine_addr(e, addr, sizeof(addr), NULL);
	printf("address:       %d bytes\n", len);
	xfer_engine_destroy(e);
	return 0;
}
