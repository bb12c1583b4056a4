#include "kv_stack.h"

#include <errno.h>
#include <stdlib.h>

int xi_kv_stack_init(struct kv_stack *s, uint32_t cap)
{
	s->v = malloc((size_t)(cap ? cap : 1) * sizeof(*s->v));
	if (!s->v)
		return -ENOMEM;
	s->cap = s->n = cap;
	for (uint32_t i = 0; i < cap; i++)
		s->v[i] = cap - 1 - i;
	return 0;
}

void xi_kv_stack_free(struct kv_stack *s)
{
	free(s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}

bool xi_kv_stack_pop(struct kv_stack *s, uint32_t *out, uint32_t n)
{
	if (n > s->n)
		return false;
	for (uint32_t i = 0; i < n; i++)
		out[i] = s->v[--s->n];
	return true;
}

void xi_kv_stack_push(struct kv_stack *s, const uint32_t *in, uint32_t n)
{
	/* Reversed, so that popping the same count gives back the same order. */
	for (uint32_t i = n; i-- > 0 && s->n < s->cap;)
		s->v[s->n++] = in[i];
}
