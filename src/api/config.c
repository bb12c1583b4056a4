/* Engine defaults and the XFER_* environment variables that override them. */
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "xfer.h"

static void env_u32(const char *name, uint32_t *dst)
{
	const char *v = getenv(name);
	char *end;
	if (!v || !*v)
		return;
	unsigned long x = strtoul(v, &end, 0);
	if (*end || x > UINT32_MAX)
		xwarn("ignoring %s=%s: not a number", name, v);
	else
		*dst = (uint32_t)x;
}

void xfer_attr_init(struct xfer_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->provider = "auto";
	a->nics = NULL;
	a->worker_cpu = -1;
	a->submit_depth = 4096;
	a->max_ops = 4096;
	a->recv_count = 64;
	a->msg_max = 8192;
	a->imm_slots = 4096;
	a->max_regions = 65536;
	a->spin_us = 50;
	a->timeout_ms = 60000;
	a->log_level = XFER_LOG_WARN;
	a->heartbeat_ms = 0;
	a->heartbeat_misses = 10;

	const char *v;
	if ((v = getenv("XFER_PROVIDER")) && *v)
		a->provider = v;
	if ((v = getenv("XFER_NICS")) && *v)
		a->nics = v;
	if ((v = getenv("XFER_WORKER_CPU")) && *v) {
		char *end;
		long cpu = strtol(v, &end, 10);
		if (!strcmp(v, "auto"))
			a->worker_cpu = XFER_CPU_AUTO;
		else if (*end || cpu < -1 || cpu > 65535)
			xwarn("ignoring XFER_WORKER_CPU=%s: a CPU number, -1 or auto", v);
		else
			a->worker_cpu = (int)cpu;
	}
	uint32_t timeout = (uint32_t)a->timeout_ms;
	env_u32("XFER_SUBMIT_DEPTH", &a->submit_depth);
	env_u32("XFER_MAX_OPS", &a->max_ops);
	env_u32("XFER_RECV_COUNT", &a->recv_count);
	env_u32("XFER_MSG_MAX", &a->msg_max);
	env_u32("XFER_IMM_SLOTS", &a->imm_slots);
	env_u32("XFER_MAX_REGIONS", &a->max_regions);
	env_u32("XFER_SPIN_US", &a->spin_us);
	env_u32("XFER_BUSY_POLL", &a->busy_poll);
	env_u32("XFER_TIMEOUT_MS", &timeout);
	if ((v = getenv("XFER_LOG_LEVEL")) && *v && xi_log_parse_level(v, &a->log_level))
		xwarn("ignoring XFER_LOG_LEVEL=%s: error, warn, info, debug or a number", v);
	env_u32("XFER_HEARTBEAT_MS", &a->heartbeat_ms);
	env_u32("XFER_HEARTBEAT_MISSES", &a->heartbeat_misses);
	a->timeout_ms = timeout;
}
