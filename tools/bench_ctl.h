/* The control socket between initiator and target: length-framed messages
 * over TCP (or a socketpair when both sides are forked locally). It carries
 * only setup and results, never the data being measured. */
#ifndef XFER_BENCH_CTL_H
#define XFER_BENCH_CTL_H

#include <stdint.h>

enum ctl_type {
	MSG_HELLO = 1, /* struct ctl_hello, both ways */
	MSG_ADDR,      /* xfer engine address */
	MSG_RAWADDR,   /* raw libfabric endpoint names and sink keys */
	MSG_CASE,      /* struct bench_case */
	MSG_READY,     /* the target's region descriptor for the case */
	MSG_END,       /* struct ctl_end: the initiator is done posting */
	MSG_RESULT,    /* struct ctl_result */
	MSG_UCX_START, /* struct ctl_ucx: start ucx_perftest's server side */
	MSG_UCX_WAIT,  /* the client finished: reap the server */
	MSG_BYE,
};

#define CTL_MAGIC 0x58424e43u /* "XBNC" */
#define CTL_VERSION 2
#define CTL_MAX (64u << 10)

struct ctl_hello {
	uint32_t magic, version;
	int32_t status; /* the target's answer: 0, or why it cannot serve */
	uint32_t impls; /* bit per enum bench_impl the initiator will run */
	uint32_t raw_transmit;
	uint32_t raw_pin; /* pin the raw loop's threads (see raw_pin) */
	uint32_t cpu_pin; /* --cpu-pin: lay out both sides (see bench_layout) */
	int32_t busy_poll; /* --busy-poll: 0 off, 1 on, -1 as the environment says */
	char provider[64];
	char nics[192];
};

struct ctl_end {
	uint64_t calls; /* calls posted in all phases */
	uint64_t imms;  /* immediates the target must have received */
};

struct ctl_result {
	int32_t status;   /* 0 or -errno */
	int32_t verified; /* 1 checked and correct, 0 not checked */
	uint64_t sleeps;  /* times the target's engine worker went to sleep (xfer) */
	char msg[176];
};

struct ctl_ucx {
	uint32_t port;
	char tls[32];
};

struct ctl {
	int fd;
};

/* "[ADDR:]PORT": accepts one initiator. */
int ctl_listen(const char *spec, struct ctl *c);
/* "ADDR:PORT": retries for a few seconds while the target starts. */
int ctl_connect(const char *spec, struct ctl *c);
int ctl_pair(struct ctl *a, struct ctl *b);
void ctl_close(struct ctl *c);

int ctl_send(struct ctl *c, uint32_t type, const void *p, uint32_t len);
/* Receives one message; -ETIMEDOUT after timeout_ms (<0: forever), -EPIPE
 * when the peer went away, -EPROTO when it does not fit in cap. */
int ctl_recv(struct ctl *c, uint32_t *type, void *p, uint32_t cap, uint32_t *len, int timeout_ms);
/* As ctl_recv, but any type other than `type` is an error (-EPROTO). */
int ctl_expect(struct ctl *c, uint32_t type, void *p, uint32_t cap, uint32_t *len, int timeout_ms);
/* 1 when a message (or EOF) is waiting, without blocking. */
int ctl_readable(struct ctl *c);

/* Ends a case from the initiator: tells the target what to expect, then
 * waits for its verdict (0, or the target's error). */
int case_finish(struct ctl *ctl, uint64_t calls, uint64_t imms, struct ctl_result *res);
/* Target: waits for the initiator's END, or fails when the socket dies. */
int case_wait_end(struct ctl *ctl, struct ctl_end *end);
/* Target: sends the verdict. */
int case_reply(struct ctl *ctl, int status, int verified, const char *msg);
/* As case_reply, with the target engine's worker sleeps during the case. */
int case_reply_sleeps(struct ctl *ctl, int status, int verified, uint64_t sleeps, const char *msg);

#endif
