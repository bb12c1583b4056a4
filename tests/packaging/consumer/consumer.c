/* Links against an installed libxfer and proves it runs: the version it
 * loaded equals the header's, and an engine on tcp over loopback opens. */
#include <stdio.h>
#include <string.h>

#include <xfer.h>

#define STR_(x) #x
#define STR(x) STR_(x)

int main(void)
{
	const char *want = STR(XFER_VERSION_MAJOR) "." STR(XFER_VERSION_MINOR) "." STR(XFER_VERSION_PATCH);
	if (strcmp(xfer_version(), want)) {
		fprintf(stderr, "consumer: library %s, header %s\n", xfer_version(), want);
		return 1;
	}
	struct xfer_attr a;
	xfer_attr_init(&a);
	a.provider = "tcp";
	a.nics = "lo";
	xfer_engine_t *e;
	int rc = xfer_engine_create(&a, &e);
	if (rc) {
		fprintf(stderr, "consumer: engine: %s\n", xfer_strerror(rc));
		return 1;
	}
	printf("consumer: xfer %s, %s on %s\n", xfer_version(), xfer_engine_provider(e), xfer_engine_nic_name(e, 0));
	xfer_engine_destroy(e);
	return 0;
}
