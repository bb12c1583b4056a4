/* Shared pieces of the KV-module tests: a small model's layouts, KV pools
 * filled with data that says where it belongs, and a prefill process that
 * serves requests the way an inference engine would, layer by layer. */
#ifndef XFER_KV_TEST_H
#define XFER_KV_TEST_H

#include <stdbool.h>
#include <stdint.h>

#include "helpers.h"
#include "xfer_kv.h"

#define KVT_LAYERS 4
#define KVT_PAGE_TOKENS 4
#define KVT_HEAD_DIM 16
#define KVT_DTYPE 2
#define KVT_CTX 256
#define KVT_POISON 0xee

struct xfer_kv_layout kvt_layout(uint32_t kind, uint32_t heads, uint32_t tp, uint32_t rank,
				 uint32_t pages, uint32_t fused);
/* A pool for layout l with every byte `poison`. */
void *kvt_pool(const struct xfer_kv_layout *l, uint8_t poison);

/* Writes request req's data for one layer into the pages (all heads held). */
void kvt_fill(const struct xfer_kv_layout *l, void *kv, const uint32_t *pages, uint32_t n,
	      uint64_t req, uint32_t layer);
/* Blocks (head, component, layer, page) that differ from request req's data. */
uint64_t kvt_verify(const struct xfer_kv_layout *l, const void *kv, const uint32_t *pages,
		    uint32_t n, uint64_t req);
/* Sets every byte of the pages (all layers) to v / checks that they are. */
void kvt_poison(const struct xfer_kv_layout *l, void *kv, const uint32_t *pages, uint32_t n,
		uint8_t v);
bool kvt_is_poison(const struct xfer_kv_layout *l, const void *kv, const uint32_t *pages,
		   uint32_t n, uint8_t v);
void kvt_ctx(void *buf, uint32_t len, uint64_t req);

/* Engine attributes for the tests: loopback tcp or shm, fast liveness. */
void kvt_attr(struct xfer_attr *a, uint32_t heartbeat_ms);

struct kvt_serve {
	uint32_t layer_us;     /* busy time per layer, standing in for compute */
	uint32_t die_after;    /* SIGKILL itself after this many layers (0: never) */
	uint32_t freeze_after; /* SIGSTOP itself after this many layers (0: never) */
	bool ignore;           /* never start the prefill (a stuck prefiller) */
	uint32_t served, cancelled; /* out */
};
/* Serves requests until the parent sends 0 on fd (1: leave first). */
void kvt_prefill_serve(xfer_kv_prefiller_t *p, const struct xfer_kv_layout *l, void *kv, int fd,
		       struct kvt_serve *o);

/* Creates a prefiller for layout l (pool filled with poison). */
xfer_kv_prefiller_t *kvt_prefiller(const struct xfer_kv_layout *l, void **kv, uint32_t heartbeat_ms);
xfer_kv_decoder_t *kvt_decoder(const struct xfer_kv_layout *l, void **kv, uint32_t heartbeat_ms,
			       uint32_t max_requests);

/* Sends the engine address to the parent / relays. */
void kvt_send_addr(int fd, xfer_engine_t *e);
/* Waits for one event; fails the test after timeout_ms. */
struct xfer_kv_dec_event kvt_event(xfer_kv_decoder_t *d, uint64_t timeout_ms);
uint64_t kvt_ms(void);

#endif
