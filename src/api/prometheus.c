/* xfer_stats_prometheus: every figure of api/stats.c in the Prometheus
 * text exposition format 0.0.4. A snapshot is taken first (inside the
 * telemetry sequence, so that a peer removed meanwhile is counted once),
 * then rendered family by family from tables, so that a new counter is one
 * table row. Runs on the caller's thread; it allocates the snapshot, never
 * touches the worker. Serving it over HTTP is left to the application
 * (python/xfer/_metrics.py does it for Python). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/telemetry.h"
#include "util/hist.h"

#define SNAPSHOT_TRIES 4

/* ------------------------------------------------------------------ text */

/* Output that counts what it could not hold, for the -ENOSPC answer. */
struct text {
	char *buf;
	size_t cap, len;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
	size_t room = t->len < t->cap ? t->cap - t->len : 0;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->len += (size_t)n;
}

/* A label value: backslash, double quote and newline escaped. */
static void put_label(struct text *t, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			put(t, "\\%c", *s);
		else if (*s == '\n')
			put(t, "\\n");
		else
			put(t, "%c", *s);
	}
}

static void family(struct text *t, const char *name, const char *type, const char *help)
{
	put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ------------------------------------------------------------- snapshot */

struct snapshot {
	char engine[17]; /* the engine id, the label of every series */
	struct xfer_stats base;
	struct xfer_stats_engine eng;
	struct xfer_stats_nic nic[XFER_NIC_MAX];
	struct xfer_stats_latency lat[XFER_OP_BARRIER];
	struct xfer_stats_peer removed;
	struct xfer_stats_peer *peers;
	uint32_t npeers;
};

#define SIZED(s) ((s).size = (uint32_t)sizeof(s))

static void take(const xfer_engine_t *e, struct snapshot *s, xfer_peer_t *ids, uint32_t max)
{
	xfer_engine_stats(e, &s->base);
	SIZED(s->eng);
	xfer_stats_engine(e, &s->eng);
	for (unsigned n = 0; n < e->nnics; n++) {
		SIZED(s->nic[n]);
		xfer_stats_nic(e, n, &s->nic[n]);
	}
	for (uint32_t k = XFER_OP_SEND; k <= XFER_OP_BARRIER; k++) {
		SIZED(s->lat[k - 1]);
		xfer_stats_latency(e, k, &s->lat[k - 1]);
	}
	SIZED(s->removed);
	xfer_stats_peer(e, XFER_PEER_NONE, &s->removed);
	int n = xfer_stats_peers(e, ids, (int)max);
	s->npeers = 0;
	for (int i = 0; i < n && (uint32_t)i < max; i++) {
		struct xfer_stats_peer *p = &s->peers[s->npeers];
		SIZED(*p);
		if (xfer_stats_peer(e, ids[i], p) == 0) /* else removed meanwhile */
			s->npeers++;
	}
}

/* ------------------------------------------------------------ families */

struct counter {
	const char *name, *help;
	size_t off; /* of a uint64_t field */
};

static uint64_t field(const void *st, size_t off)
{
	uint64_t v;
	memcpy(&v, (const char *)st + off, sizeof(v));
	return v;
}

#define ENGINE_BASE(f, n, h) {"xfer_" n "_total", h, offsetof(struct xfer_stats, f)}
static const struct counter engine_base[] = {
	ENGINE_BASE(ops_submitted, "ops_submitted", "Submissions accepted, every kind."),
	ENGINE_BASE(ops_completed, "ops_completed", "Completions delivered (queue or callback)."),
	ENGINE_BASE(ops_failed, "ops_failed", "Completions delivered with an error."),
	ENGINE_BASE(wrs_posted, "wrs_posted", "Requests posted to the NICs for operations."),
	ENGINE_BASE(bytes_written, "written_bytes", "Payload bytes of posted write requests."),
	ENGINE_BASE(imms_received, "imms_received", "Immediate arrivals seen."),
	ENGINE_BASE(imms_dropped, "imms_dropped", "Immediate arrivals lost: every imm slot was in use."),
	ENGINE_BASE(msgs_received, "msgs_received", "Application messages received."),
	ENGINE_BASE(worker_sleeps, "worker_sleeps", "Times the worker slept."),
	ENGINE_BASE(msgs_refused, "msgs_refused", "Messages dropped: their claimed sender did not match the source."),
};

#define ENGINE_TEL(f, h) {"xfer_" #f "_total", h, offsetof(struct xfer_stats_engine, f)}
static const struct counter engine_tel[] = {
	ENGINE_TEL(submit_again, "Submissions refused with EAGAIN: the submission queue was full."),
	ENGINE_TEL(retries, "Posts the provider refused with EAGAIN and that were tried again."),
	ENGINE_TEL(timeouts, "Operations, expectations and cancels whose deadline passed."),
};

#define PEER(f, n, h) {"xfer_peer_" n "_total", h, offsetof(struct xfer_stats_peer, f)}
static const struct counter peer_counters[] = {
	PEER(ops, "ops", "Send, write, paged and imm operations to the peer that completed."),
	PEER(writes, "writes", "Write requests posted to the peer."),
	PEER(bytes_written, "written_bytes", "Payload bytes written to the peer."),
	PEER(sends, "sends", "Application messages sent to the peer."),
	PEER(bytes_sent, "sent_bytes", "Payload bytes of messages sent to the peer."),
	PEER(msgs_received, "msgs_received", "Application messages received from the peer's engine."),
	PEER(bytes_received, "received_bytes", "Payload bytes of messages received from the peer's engine."),
	PEER(retries, "retries", "Posts to the peer the provider refused with EAGAIN, tried again."),
	PEER(timeouts, "timeouts", "Operations to the peer whose deadline passed."),
};

#define NIC(f, n, h) {"xfer_nic_" n "_total", h, offsetof(struct xfer_stats_nic, f)}
static const struct counter nic_counters[] = {
	NIC(writes, "writes", "Write requests posted on the NIC."),
	NIC(bytes_written, "written_bytes", "Payload bytes of write requests posted on the NIC."),
	NIC(sends, "sends", "Messages posted on the NIC: application messages and GPU notices."),
	NIC(bytes_sent, "sent_bytes", "Bytes of messages posted on the NIC, headers included."),
	NIC(probes, "probes", "Liveness probes (PING, PONG, BYE) posted on the NIC."),
	NIC(retries, "retries", "Posts the provider refused with EAGAIN."),
	NIC(tx_errors, "tx_errors", "Requests that completed with an error."),
	NIC(imms_received, "imms_received", "Peers' writes with an immediate that landed through the NIC."),
	NIC(msgs_received, "msgs_received", "Messages received: application, notices and probes."),
	NIC(bytes_received, "received_bytes", "Bytes of messages received, headers included."),
	NIC(recv_errors, "recv_errors", "Receives that failed or held a malformed message."),
};

static const char *const kind_names[XFER_OP_BARRIER + 1] = {
	[XFER_OP_SEND] = "send",     [XFER_OP_WRITE] = "write",     [XFER_OP_PAGED] = "paged",
	[XFER_OP_IMM] = "imm",       [XFER_OP_EXPECT] = "expect",   [XFER_OP_CANCEL] = "cancel",
	[XFER_OP_SCATTER] = "scatter", [XFER_OP_BARRIER] = "barrier",
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void engine_families(struct text *t, const struct snapshot *s)
{
	family(t, "xfer_telemetry_enabled", "gauge", "1 while telemetry is on (XFER_TELEMETRY, xfer_engine_telemetry).");
	put(t, "xfer_telemetry_enabled{engine=\"%s\"} %u\n", s->engine, s->eng.enabled);
	for (size_t i = 0; i < N(engine_base); i++) {
		family(t, engine_base[i].name, "counter", engine_base[i].help);
		put(t, "%s{engine=\"%s\"} %llu\n", engine_base[i].name, s->engine,
		    (unsigned long long)field(&s->base, engine_base[i].off));
	}
	for (size_t i = 0; i < N(engine_tel); i++) {
		family(t, engine_tel[i].name, "counter", engine_tel[i].help);
		put(t, "%s{engine=\"%s\"} %llu\n", engine_tel[i].name, s->engine,
		    (unsigned long long)field(&s->eng, engine_tel[i].off));
	}
	family(t, "xfer_errors_total", "counter", "Completions with an error, every kind, by code (codes seen so far).");
	for (unsigned c = 0; c < XFER_STATS_CODES; c++)
		if (s->eng.errors[c])
			put(t, "xfer_errors_total{engine=\"%s\",code=\"%s\"} %llu\n", s->engine, xfer_stats_code_name(c),
			    (unsigned long long)s->eng.errors[c]);
}

static void peer_labels(struct text *t, const struct snapshot *s, const struct xfer_stats_peer *p)
{
	if (p->peer == XFER_PEER_NONE)
		put(t, "{engine=\"%s\",peer=\"removed\",peer_engine=\"\"", s->engine);
	else
		put(t, "{engine=\"%s\",peer=\"%u\",peer_engine=\"%016llx\"", s->engine, p->peer,
		    (unsigned long long)p->engine_id);
}

static void peer_families(struct text *t, const struct snapshot *s)
{
	family(t, "xfer_peer_live", "gauge", "1 while the peer is live, 0 once it failed (until removed).");
	for (uint32_t i = 0; i < s->npeers; i++) {
		put(t, "xfer_peer_live");
		peer_labels(t, s, &s->peers[i]);
		put(t, "} %d\n", s->peers[i].state == XFER_PEER_LIVE);
	}
	/* Every peer held, then the totals of the removed ones (peer="removed"). */
	for (size_t f = 0; f < N(peer_counters); f++) {
		family(t, peer_counters[f].name, "counter", peer_counters[f].help);
		for (uint32_t i = 0; i <= s->npeers; i++) {
			const struct xfer_stats_peer *p = i < s->npeers ? &s->peers[i] : &s->removed;
			put(t, "%s", peer_counters[f].name);
			peer_labels(t, s, p);
			put(t, "} %llu\n", (unsigned long long)field(p, peer_counters[f].off));
		}
	}
	family(t, "xfer_peer_errors_total", "counter",
	       "Operations to the peer (scatter and barrier: entries) that failed, by code (codes seen so far).");
	for (uint32_t i = 0; i <= s->npeers; i++) {
		const struct xfer_stats_peer *p = i < s->npeers ? &s->peers[i] : &s->removed;
		for (unsigned c = 0; c < XFER_STATS_CODES; c++) {
			if (!p->errors[c])
				continue;
			put(t, "xfer_peer_errors_total");
			peer_labels(t, s, p);
			put(t, ",code=\"%s\"} %llu\n", xfer_stats_code_name(c), (unsigned long long)p->errors[c]);
		}
	}
}

static void nic_families(struct text *t, const xfer_engine_t *e, const struct snapshot *s)
{
	for (size_t f = 0; f < N(nic_counters); f++) {
		family(t, nic_counters[f].name, "counter", nic_counters[f].help);
		for (unsigned n = 0; n < e->nnics; n++) {
			put(t, "%s{engine=\"%s\",nic=\"%u\",domain=\"", nic_counters[f].name, s->engine, n);
			put_label(t, xfer_engine_nic_name(e, n));
			put(t, "\"} %llu\n", (unsigned long long)field(&s->nic[n], nic_counters[f].off));
		}
	}
}

/* Kinds with at least one completion; buckets cumulative, as the format
 * wants, with the log2 bounds of util/hist.h in seconds. */
static void latency_family(struct text *t, const struct snapshot *s)
{
	family(t, "xfer_op_latency_seconds", "histogram",
	       "Submission to completion delivered, by op kind (kinds seen so far; log2 buckets).");
	for (uint32_t k = XFER_OP_SEND; k <= XFER_OP_BARRIER; k++) {
		const struct xfer_stats_latency *l = &s->lat[k - 1];
		if (!l->count)
			continue;
		uint64_t cum = 0;
		for (unsigned b = 0; b < XFER_STATS_BUCKETS; b++) {
			cum += l->buckets[b];
			put(t, "xfer_op_latency_seconds_bucket{engine=\"%s\",kind=\"%s\",le=\"", s->engine, kind_names[k]);
			if (b < XFER_STATS_BUCKETS - 1)
				put(t, "%.9g", (double)xi_hist_bound_ns(b) / 1e9);
			else
				put(t, "+Inf");
			put(t, "\"} %llu\n", (unsigned long long)cum);
		}
		put(t, "xfer_op_latency_seconds_sum{engine=\"%s\",kind=\"%s\"} %llu.%09llu\n", s->engine, kind_names[k],
		    (unsigned long long)(l->sum_ns / 1000000000ull), (unsigned long long)(l->sum_ns % 1000000000ull));
		put(t, "xfer_op_latency_seconds_count{engine=\"%s\",kind=\"%s\"} %llu\n", s->engine, kind_names[k],
		    (unsigned long long)cum);
	}
}

int xfer_stats_prometheus(const xfer_engine_t *e, char *buf, size_t cap, size_t *need)
{
	if (!e || (cap && !buf))
		return -EINVAL;
	struct snapshot s = {0};
	xfer_peer_t *ids = malloc(e->max_peers * sizeof(*ids));
	s.peers = malloc(e->max_peers * sizeof(*s.peers));
	if (!ids || !s.peers) {
		free(ids);
		free(s.peers);
		return -ENOMEM;
	}
	snprintf(s.engine, sizeof(s.engine), "%016llx", (unsigned long long)e->id);
	for (int tries = 0; tries < SNAPSHOT_TRIES; tries++) {
		unsigned seq = xi_tel_seq_begin(e);
		take(e, &s, ids, e->max_peers);
		if (!xi_tel_seq_retry(e, seq))
			break;
	}
	free(ids);
	struct text t = {.buf = buf, .cap = cap};
	engine_families(&t, &s);
	peer_families(&t, &s);
	nic_families(&t, e, &s);
	latency_family(&t, &s);
	free(s.peers);
	if (t.len >= cap || t.len > INT32_MAX) {
		if (need)
			*need = t.len + 1;
		return -ENOSPC;
	}
	return (int)t.len;
}
