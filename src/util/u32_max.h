/* The largest of n 32-bit words (0 for none): a paged write's page lists
 * are scanned with it at submission, on the application's thread and on
 * the way of the call (their bounds: api/submit.c). */
#ifndef XFER_UTIL_U32_MAX_H
#define XFER_UTIL_U32_MAX_H

#include <stdint.h>

uint32_t xi_u32_max(const uint32_t *v, uint32_t n);

#endif
