/* The bounded byte cursor of every wire format (wire.c: addresses and
 * descriptors; kv/kv_wire.c: the KV module's messages). Integers are little
 * endian. It never reads or writes past its end: once it overruns, every
 * later access is a no-op and `bad` stays set. An encoder's `pos` still
 * counts what would have been written, so a cursor with no buffer (w NULL,
 * cap 0) measures. */
#ifndef XFER_WIRE_CURSOR_H
#define XFER_WIRE_CURSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct wire_cursor {
	uint8_t *w;
	const uint8_t *r;
	size_t pos, cap;
	int bad;
};

static inline void wc_put(struct wire_cursor *c, const void *src, size_t n)
{
	if (c->bad || n > c->cap - c->pos) {
		c->bad = 1;
		c->pos += n;
		return;
	}
	if (c->w && n)
		memcpy(c->w + c->pos, src, n);
	c->pos += n;
}

static inline void wc_put_u(struct wire_cursor *c, uint64_t v, size_t n)
{
	uint8_t b[8];
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	wc_put(c, b, n);
}

/* The next n bytes in place, or NULL past the end. */
static inline const uint8_t *wc_take(struct wire_cursor *c, size_t n)
{
	if (c->bad || n > c->cap - c->pos) {
		c->bad = 1;
		return NULL;
	}
	const uint8_t *p = c->r + c->pos;
	c->pos += n;
	return p;
}

/* Copies the next n bytes; zeros past the end. */
static inline void wc_get(struct wire_cursor *c, void *dst, size_t n)
{
	const uint8_t *p = wc_take(c, n);
	if (p)
		memcpy(dst, p, n);
	else
		memset(dst, 0, n);
}

static inline uint64_t wc_get_u(struct wire_cursor *c, size_t n)
{
	const uint8_t *p = wc_take(c, n);
	uint64_t v = 0;
	for (size_t i = 0; p && i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#endif
