/* How an op travels, chosen once when the worker accepts it:
 *   fabric       requests straight to the NICs (host memory, and GPU regions
 *                the NICs register in place); also every SEND, immediate-only
 *                write and barrier
 *   staged       into a peer's GPU region through its host mirror: the data
 *                requests without their immediate, then notices
 *   ipc          into a GPU region of a peer on this host: GPU copies through
 *                its CUDA IPC mapping, then one notice with the count
 *   scatter-gpu  a scatter with entries into GPU regions: each entry takes
 *                one of the three ways above, with a notice of its own
 * A GPU source read through its host mirror is a property of the source
 * (op->src_mirror) that every path consults before it posts from it. */
#ifndef XFER_CORE_PATH_H
#define XFER_CORE_PATH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/objects.h"

struct worker;
struct op;
struct wr;

struct op_path {
	const char *name;
	/* Posts what credits allow: 0 when nothing is left to post (or the op
	 * failed), -EAGAIN when stalled (the op stays at the FIFO's head). */
	int (*post)(struct worker *w, struct op *op);
	/* Request wr of its op completed at the NIC with status. */
	void (*sent)(struct worker *w, struct wr *wr, int status);
	/* Something of op completed: move it on to its next phase, or finish it. */
	void (*settle)(struct worker *w, struct op *op);
};

/* The smallest max_msg of the engine's NICs: longer writes go as chunks. */
uint64_t xi_min_max_msg(const xfer_engine_t *e);
/* A write of len bytes splits into few enough chunks to count in 32 bits
 * (at most 2^20 chunks per shard). */
bool xi_write_chunks_ok(const xfer_engine_t *e, uint64_t len);

/* Starts an op for s (a free op exists) and queues it for posting. */
void xi_path_accept(struct worker *w, const struct sub *s);
/* Posts the FIFO in order until an op stalls; returns how many ops left it. */
int xi_path_post_pending(struct worker *w);
/* A TX completion of a request context of kind WR_OP. */
void xi_path_sent(struct worker *w, struct wr *wr, int status);
/* The GPU event of a WR_STAGE context: its op's source is in the mirror. */
void xi_path_staged_src(struct worker *w, struct wr *wr, int status);

#endif
