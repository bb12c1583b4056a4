/* xfer-info's two outputs: a table for people, one JSON object for
 * programs (same facts, same order; docs/config.md lists the fields). */
#include <stdio.h>

#include "info.h"

static const char *dev_kind(int kind)
{
	return kind == XFER_DEV_GPU ? "gpu" : "nic";
}

static void text_engine(const struct info_engine *e, FILE *f)
{
	if (e->rc) {
		fprintf(f, "  %-12s not available: %s\n", e->provider, xfer_strerror(e->rc));
		return;
	}
	fprintf(f, "  %-12s -> %s, %u NIC(s), address %d bytes\n", e->provider, e->chosen, e->nic_count,
		e->addr_len);
	for (unsigned i = 0; i < e->nic_count && i < INFO_NIC_MAX; i++) {
		const struct info_nic *n = &e->nic[i];
		fprintf(f, "    nic %u: %-8s tx %u rx %u, max msg %llu, %s completion, GPU memory %s\n", i,
			n->domain, n->tx_depth, n->rx_depth, n->max_msg,
			n->delivery_complete ? "delivery" : "transmit", n->gpu_path);
	}
}

void info_print_text(const struct info *in, FILE *f)
{
	const struct xfer_attr *a = &in->attr;
	fprintf(f, "xfer %s (compiled against %d.%d.%d)\n\n", xfer_version(), XFER_VERSION_MAJOR,
		XFER_VERSION_MINOR, XFER_VERSION_PATCH);
	fprintf(f, "configuration (defaults, XFER_* environment, options):\n");
	fprintf(f, "  provider %s, nics %s, worker cpu %d, spin %u us, log level %d\n", a->provider,
		a->nics ? a->nics : "(first)", a->worker_cpu, a->spin_us, a->log_level);
	fprintf(f, "  submit depth %u, max ops %u, recv %u x %u B, imm slots %u, regions %u\n",
		a->submit_depth, a->max_ops, a->recv_count, a->msg_max, a->imm_slots, a->max_regions);
	fprintf(f, "  timeout %llu ms, heartbeat %u ms x %u\n", (unsigned long long)a->timeout_ms,
		a->heartbeat_ms, a->heartbeat_misses);

	fprintf(f, "\nengine (what xfer_engine_create picks with this configuration):\n");
	text_engine(&in->selected, f);

	fprintf(f, "\nproviders (each on its first NIC):\n");
	for (int i = 0; i < in->nproviders; i++)
		text_engine(&in->providers[i], f);

	fprintf(f, "\ntopology:\n");
	if (in->ndevs < 0) {
		fprintf(f, "  unavailable: %s\n", xfer_strerror(in->ndevs));
		return;
	}
	for (int i = 0; i < in->ndevs && i < INFO_DEV_MAX; i++)
		fprintf(f, "  %-4s %-12s pci %-13s numa %d\n", dev_kind(in->devs[i].kind), in->devs[i].name,
			in->devs[i].pci[0] ? in->devs[i].pci : "-", in->devs[i].numa);
	for (int g = 0; g < in->ngpus; g++)
		fprintf(f, "  domain group for gpu%d: %s\n", g, in->gpu_nics[g][0] ? in->gpu_nics[g] : "(no NIC)");
	if (!in->ngpus)
		fprintf(f, "  no GPU found: one domain group with the NICs named in --nics\n");
}

/* A JSON string, or null for NULL. */
static void jstr(FILE *f, const char *s)
{
	if (!s) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static void json_engine(const struct info_engine *e, FILE *f)
{
	fputs("{\"provider\": ", f);
	jstr(f, e->provider);
	fputs(", \"nics\": ", f);
	jstr(f, e->nics);
	fprintf(f, ", \"ok\": %s, \"error\": ", e->rc ? "false" : "true");
	jstr(f, e->rc ? xfer_strerror(e->rc) : NULL);
	if (e->rc) {
		fputc('}', f);
		return;
	}
	fputs(", \"chosen\": ", f);
	jstr(f, e->chosen);
	fprintf(f, ", \"address_bytes\": %d, \"nic\": [", e->addr_len);
	for (unsigned i = 0; i < e->nic_count && i < INFO_NIC_MAX; i++) {
		const struct info_nic *n = &e->nic[i];
		fprintf(f, "%s{\"domain\": ", i ? ", " : "");
		jstr(f, n->domain);
		fprintf(f, ", \"tx_depth\": %u, \"rx_depth\": %u, \"max_msg\": %llu, \"delivery_complete\": %s, "
			   "\"gpu_path\": ",
			n->tx_depth, n->rx_depth, n->max_msg, n->delivery_complete ? "true" : "false");
		jstr(f, n->gpu_path);
		fputc('}', f);
	}
	fputs("]}", f);
}

void info_print_json(const struct info *in, FILE *f)
{
	const struct xfer_attr *a = &in->attr;
	fputs("{\"version\": ", f);
	jstr(f, xfer_version());
	fprintf(f, ", \"header_version\": \"%d.%d.%d\"", XFER_VERSION_MAJOR, XFER_VERSION_MINOR,
		XFER_VERSION_PATCH);
	fputs(",\n \"config\": {\"provider\": ", f);
	jstr(f, a->provider);
	fputs(", \"nics\": ", f);
	jstr(f, a->nics);
	fprintf(f,
		", \"worker_cpu\": %d, \"submit_depth\": %u, \"max_ops\": %u, \"recv_count\": %u, "
		"\"msg_max\": %u, \"imm_slots\": %u, \"max_regions\": %u, \"spin_us\": %u, "
		"\"timeout_ms\": %llu, \"log_level\": %d, \"heartbeat_ms\": %u, \"heartbeat_misses\": %u}",
		a->worker_cpu, a->submit_depth, a->max_ops, a->recv_count, a->msg_max, a->imm_slots,
		a->max_regions, a->spin_us, (unsigned long long)a->timeout_ms, a->log_level, a->heartbeat_ms,
		a->heartbeat_misses);
	fputs(",\n \"selected\": ", f);
	json_engine(&in->selected, f);
	fputs(",\n \"providers\": [", f);
	for (int i = 0; i < in->nproviders; i++) {
		fputs(i ? ",\n   " : "", f);
		json_engine(&in->providers[i], f);
	}
	fputs("],\n \"topology\": {", f);
	if (in->ndevs < 0) {
		fputs("\"error\": ", f);
		jstr(f, xfer_strerror(in->ndevs));
		fputs(", \"devices\": [], \"domain_groups\": []}}\n", f);
		return;
	}
	fputs("\"error\": null, \"devices\": [", f);
	for (int i = 0; i < in->ndevs && i < INFO_DEV_MAX; i++) {
		fprintf(f, "%s{\"kind\": \"%s\", \"name\": ", i ? ", " : "", dev_kind(in->devs[i].kind));
		jstr(f, in->devs[i].name);
		fputs(", \"pci\": ", f);
		jstr(f, in->devs[i].pci[0] ? in->devs[i].pci : NULL);
		fprintf(f, ", \"numa\": %d}", in->devs[i].numa);
	}
	fputs("], \"domain_groups\": [", f);
	for (int g = 0; g < in->ngpus; g++) {
		fprintf(f, "%s{\"gpu\": %d, \"nics\": ", g ? ", " : "", g);
		jstr(f, in->gpu_nics[g][0] ? in->gpu_nics[g] : NULL);
		fputc('}', f);
	}
	fputs("]}}\n", f);
}
