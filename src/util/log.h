#ifndef XFER_LOG_H
#define XFER_LOG_H

#include <stdatomic.h>

#include "xfer.h" /* enum xfer_log_level, xfer_log_fn */

/* Process-wide; engines set it at creation while other engines' workers log. */
extern _Atomic int xi_log_level;

/* One line to the handler set with xfer_log_set_handler, or to stderr. */
void xi_log_emit(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* XFER_LOG_LEVEL's syntax: a name (error, warn, warning, info, debug; any
 * case) or a number (strtol base 0). 0 and the level in *out, or -EINVAL. */
int xi_log_parse_level(const char *v, int *out);

#define xlog(level, ...)                                                                    \
	do {                                                                                \
		if ((level) <= atomic_load_explicit(&xi_log_level, memory_order_relaxed)) \
			xi_log_emit((level), __VA_ARGS__);                                \
	} while (0)
#define xerr(...) xlog(XFER_LOG_ERROR, __VA_ARGS__)
#define xwarn(...) xlog(XFER_LOG_WARN, __VA_ARGS__)
#define xinfo(...) xlog(XFER_LOG_INFO, __VA_ARGS__)
#define xdbg(...) xlog(XFER_LOG_DEBUG, __VA_ARGS__)

#endif
