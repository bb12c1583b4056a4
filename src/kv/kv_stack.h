/* A stack of free indices (pages, request slots): the most recently freed
 * index is reused first. */
#ifndef XFER_KV_STACK_H
#define XFER_KV_STACK_H

#include <stdbool.h>
#include <stdint.h>

struct kv_stack {
	uint32_t *v;
	uint32_t n, cap;
};

/* Holds 0..cap-1, with 0 on top. */
int xi_kv_stack_init(struct kv_stack *s, uint32_t cap);
void xi_kv_stack_free(struct kv_stack *s);
/* Takes n indices into out, or none (false) if fewer are free. */
bool xi_kv_stack_pop(struct kv_stack *s, uint32_t *out, uint32_t n);
void xi_kv_stack_push(struct kv_stack *s, const uint32_t *in, uint32_t n);

#endif
