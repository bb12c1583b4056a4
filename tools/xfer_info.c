/* xfer-info: what the engine finds and would use here, like fi_info or
 * ucx_info: the provider and NICs an engine gets with the configuration in
 * effect, each known provider's availability, the machine's GPUs and NICs
 * with their NUMA nodes, and which NICs go with which GPU.
 *
 * Exit status: 0 when an engine can be created with the configuration in
 * effect, 1 when it cannot (the requested provider or NIC is missing), 2 on
 * a usage error. */
#include <stdio.h>
#include <string.h>

#include "info.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: xfer-info [--provider NAME] [--nics LIST] [--json]\n"
		   "       xfer-info --version | --help\n"
		   "  --provider NAME  provider to ask for (default: XFER_PROVIDER, else auto)\n"
		   "  --nics LIST      comma-separated NICs (default: XFER_NICS, else the first)\n"
		   "  --json           one JSON object on stdout instead of the table\n"
		   "  --version        print the library version and exit\n"
		   "  --help           print this and exit\n"
		   "Exit status: 0 if an engine can be created with this configuration,\n"
		   "1 if not (provider or NIC missing), 2 on a usage error. See xfer-info(1).\n");
}

int main(int argc, char **argv)
{
	static struct info in; /* large (topology tables): not on the stack */
	xfer_attr_init(&in.attr);
	int json = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("xfer-info (xfer) %s\n", xfer_version());
			return 0;
		} else if (!strcmp(a, "--json")) {
			json = 1;
		} else if (!strcmp(a, "--provider") && i + 1 < argc) {
			in.attr.provider = argv[++i];
		} else if (!strcmp(a, "--nics") && i + 1 < argc) {
			in.attr.nics = argv[++i];
		} else {
			fprintf(stderr, "xfer-info: unknown or incomplete option '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
	info_probe(&in);
	if (json)
		info_print_json(&in, stdout);
	else
		info_print_text(&in, stdout);
	if (in.selected.rc) {
		fprintf(stderr, "xfer-info: no engine with provider '%s' and nics '%s': %s\n",
			in.selected.provider, in.selected.nics ? in.selected.nics : "(first)",
			xfer_strerror(in.selected.rc));
		return 1;
	}
	return 0;
}
