/* Parsing the command line into struct bench_opts, with the standard matrix
 * as the default: every op, single writes 1 KiB..64 MiB, paged writes of
 * 1..64 KiB pages, 100 and 10,000 pages per call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench_opts.h"
#include "xfer.h"

static const uint64_t default_sizes[] = {1u << 10, 4u << 10, 16u << 10, 64u << 10, 256u << 10,
					 1u << 20, 4u << 20, 16u << 20, 64u << 20};
static const uint64_t default_page_sizes[] = {1u << 10, 4u << 10, 16u << 10, 64u << 10};
static const uint64_t default_pages[] = {100, 10000};

void opts_usage(FILE *f)
{
	fprintf(f,
		"usage: xfer-bench [options]\n"
		"  With neither --listen nor --connect, forks the target locally.\n"
		"  --listen [ADDR:]PORT    be the target: wait for an initiator\n"
		"  --connect ADDR:PORT     be the initiator of a --listen target\n"
		"  --provider shm|tcp|auto|NAME   (default tcp; tcp defaults to NIC lo)\n"
		"  --nics LIST             comma-separated domains, e.g. lo or veth0,veth1\n"
		"  --op LIST               single,paged,imm,send or all (default all)\n"
		"  --size LIST             single-write and SEND sizes (K/M/G suffixes;\n"
		"                          default 1K,4K,...,64M for single, 64 for send)\n"
		"  --page-size LIST        paged: bytes per page (default 1K,4K,16K,64K)\n"
		"  --pages LIST            paged: pages per call (default 100,10000)\n"
		"  --window N              calls in flight (default 64 single, 2 paged)\n"
		"  --iters N | --seconds S timed calls per round, or seconds per row (default 1 s)\n"
		"  --rounds N              raw and xfer take turns N times; the median round\n"
		"                          is shown (default 3 with --seconds, 1 with --iters)\n"
		"  --baseline LIST         raw,ucx,memcpy,all,none (default raw)\n"
		"  --raw-completion match|transmit   raw loop's completion semantics:\n"
		"                          the engine's (default) or the provider's default\n"
		"  --raw-pin on|off        pin the raw loop's thread on each side to its own\n"
		"                          CPU during its rounds (default on)\n"
		"  --cpu-pin on|off        pin each side's application thread where its raw\n"
		"                          loop runs and its engine's worker to a core of its\n"
		"                          own (needs 4 CPUs; default off)\n"
		"  --busy-poll on|off|drive engines in busy-poll completion mode (XFER_BUSY_POLL;\n"
		"                          default: the environment's, else off); on: mode 1,\n"
		"                          or 2 where XFER_BUSY_POLL=2; drive: mode 2 (the\n"
		"                          waiting thread runs the worker's turns)\n"
		"  --verify                the target checks every byte after each row\n"
		"  --no-trace              do not collect the host-proxy overhead trace\n"
		"  --telemetry on|off|both per-peer/NIC counters and latency histograms on\n"
		"                          both engines, or off, or every xfer row measured\n"
		"                          both ways in turns and compared (default: as the\n"
		"                          engines were created, XFER_TELEMETRY)\n"
		"  --verbose               print every round on stderr\n"
		"  --json                  one JSON object per row on stdout (table on stderr)\n"
		"  --plot FILE.png         Gbit/s against size (needs python3 + matplotlib)\n"
		"  --version               print the library version and exit\n"
		"  --help                  print this and exit\n");
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B' || *end == 'b') /* "KiB", "KB" */
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_list(const char *arg, struct u64_list *l)
{
	char *copy = strdup(arg), *save = NULL;
	l->n = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (l->n == LIST_MAX || parse_size(t, &l->v[l->n])) {
			free(copy);
			return -EINVAL;
		}
		l->n++;
	}
	free(copy);
	return l->n ? 0 : -EINVAL;
}

static void set_list(struct u64_list *l, const uint64_t *v, unsigned n)
{
	l->n = n;
	memcpy(l->v, v, n * sizeof(*v));
}

static int parse_names(const char *arg, const char *const *names, unsigned count, unsigned *mask)
{
	char *copy = strdup(arg), *save = NULL;
	int ret = 0;
	*mask = 0;
	for (char *t = strtok_r(copy, ",", &save); t && !ret; t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "all")) {
			*mask = (1u << count) - 1;
			continue;
		}
		if (!strcmp(t, "none"))
			continue;
		unsigned i;
		for (i = 0; i < count && strcmp(t, names[i]); i++)
			;
		if (i == count)
			ret = -EINVAL;
		else
			*mask |= 1u << i;
	}
	free(copy);
	return ret;
}

int opts_parse(int argc, char **argv, struct bench_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->ops = (1u << OP_COUNT) - 1;
	o->seconds = 1.0;
	o->trace = true;
	o->baselines = 1u << IMPL_RAW;
	bool sizes_set = false;
	set_list(&o->sizes, default_sizes, sizeof(default_sizes) / sizeof(default_sizes[0]));
	set_list(&o->page_sizes, default_page_sizes, 4);
	set_list(&o->pages, default_pages, 2);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0, used = 1;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			opts_usage(stdout);
			return 1;
		} else if (!strcmp(a, "--version")) {
			printf("xfer-bench (xfer) %s\n", xfer_version());
			return 1;
		} else if (!strcmp(a, "--verify")) {
			o->verify = true, used = 0;
		} else if (!strcmp(a, "--json")) {
			o->json = true, used = 0;
		} else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
			o->verbose = true, used = 0;
		} else if (!strcmp(a, "--no-trace")) {
			o->trace = false, used = 0;
		} else if (!v) {
			bad = 1;
		} else if (!strcmp(a, "--provider")) {
			o->provider = v;
		} else if (!strcmp(a, "--nics")) {
			o->nics = v;
		} else if (!strcmp(a, "--listen")) {
			o->listen = v;
		} else if (!strcmp(a, "--connect")) {
			o->connect = v;
		} else if (!strcmp(a, "--plot")) {
			o->plot = v;
		} else if (!strcmp(a, "--op")) {
			bad = parse_names(v, bench_op_name, OP_COUNT, &o->ops) || !o->ops;
		} else if (!strcmp(a, "--baseline")) {
			unsigned m;
			bad = parse_names(v, bench_impl_name + 1, IMPL_COUNT - 1, &m);
			o->baselines = m << 1;
		} else if (!strcmp(a, "--size")) {
			bad = parse_list(v, &o->sizes);
			sizes_set = true;
		} else if (!strcmp(a, "--page-size")) {
			bad = parse_list(v, &o->page_sizes);
		} else if (!strcmp(a, "--pages")) {
			bad = parse_list(v, &o->pages);
		} else if (!strcmp(a, "--window")) {
			uint64_t w;
			bad = parse_size(v, &w) || !w || w > 65536;
			o->window = (uint32_t)w;
		} else if (!strcmp(a, "--iters")) {
			bad = parse_size(v, &o->iters) || !o->iters;
		} else if (!strcmp(a, "--rounds")) {
			uint64_t n;
			bad = parse_size(v, &n) || !n || n > 99;
			o->rounds = (unsigned)n;
		} else if (!strcmp(a, "--seconds")) {
			char *end;
			o->seconds = strtod(v, &end);
			bad = *end || !(o->seconds > 0);
		} else if (!strcmp(a, "--telemetry")) {
			o->telemetry = !strcmp(v, "on") ? TEL_ON : !strcmp(v, "off") ? TEL_OFF
				     : !strcmp(v, "both") ? TEL_BOTH : 99;
			bad = o->telemetry == 99;
		} else if (!strcmp(a, "--raw-pin")) {
			bad = strcmp(v, "on") && strcmp(v, "off");
			o->raw_unpinned = !strcmp(v, "off");
		} else if (!strcmp(a, "--cpu-pin")) {
			bad = strcmp(v, "on") && strcmp(v, "off");
			o->cpu_pin = !strcmp(v, "on");
		} else if (!strcmp(a, "--busy-poll")) {
			bad = strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "drive");
			/* on: busy-poll, in the mode XFER_BUSY_POLL names when it
			 * names one (2: the waiting thread drives progress), else 1. */
			const char *env = getenv("XFER_BUSY_POLL");
			unsigned mode = env && (!strcmp(env, "1") || !strcmp(env, "2")) ? (unsigned)(env[0] - '0') : 1;
			o->busy_poll = !strcmp(v, "drive") ? 2 : !strcmp(v, "on") ? mode : 0;
			o->busy_poll_set = true;
		} else if (!strcmp(a, "--raw-completion")) {
			bad = strcmp(v, "match") && strcmp(v, "transmit");
			o->raw_transmit = !strcmp(v, "transmit");
		} else {
			bad = 1;
		}
		if (bad) {
			fprintf(stderr, "xfer-bench: bad or incomplete option %s%s%s\n", a, v && used ? " " : "",
				v && used ? v : "");
			opts_usage(stderr);
			return -1;
		}
		i += used;
	}
	if (!o->rounds)
		o->rounds = o->iters ? 1 : 3;
	for (unsigned i = 0; i < o->sizes.n; i++)
		if (!o->sizes.v[i])
			return fprintf(stderr, "xfer-bench: a --size of 0 (use --op imm)\n"), -1;
	if (o->listen && o->connect) {
		fprintf(stderr, "xfer-bench: --listen and --connect exclude each other\n");
		return -1;
	}
	for (unsigned i = 0; i < o->page_sizes.n; i++)
		if (!o->page_sizes.v[i])
			return fprintf(stderr, "xfer-bench: a page size of 0\n"), -1;
	for (unsigned i = 0; i < o->pages.n; i++)
		if (!o->pages.v[i] || o->pages.v[i] > (1u << 24))
			return fprintf(stderr, "xfer-bench: --pages must be 1..16M\n"), -1;
	/* SEND sizes: the --size values a SEND can carry (1 byte is the tag
	 * that tells a ping from the stop), else 64 bytes. */
	o->send_sizes.n = 0;
	for (unsigned i = 0; sizes_set && i < o->sizes.n; i++)
		if (o->sizes.v[i] >= 1 && o->sizes.v[i] <= BENCH_MSG_MAX)
			o->send_sizes.v[o->send_sizes.n++] = o->sizes.v[i];
	if (!o->send_sizes.n) {
		if (sizes_set && (o->ops & (1u << OP_SEND)))
			fprintf(stderr, "xfer-bench: no --size fits a SEND (1..%u bytes); using 64\n",
				BENCH_MSG_MAX);
		o->send_sizes.n = 1;
		o->send_sizes.v[0] = 64;
	}
	return 0;
}

const char *opts_provider(const struct bench_opts *o)
{
	return o->provider ? o->provider : "tcp";
}

const char *opts_nics(const struct bench_opts *o)
{
	const char *p = opts_provider(o);
	if (o->nics)
		return o->nics;
	/* Loopback is the one NIC every machine has. */
	return !strcmp(p, "tcp") || !strcmp(p, "tcp;ofi_rxm") ? "lo" : NULL;
}
