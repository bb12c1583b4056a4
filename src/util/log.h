#ifndef XFER_LOG_H
#define XFER_LOG_H

#include <stdatomic.h>

enum { XFER_LOG_ERROR, XFER_LOG_WARN, XFER_LOG_INFO, XFER_LOG_DEBUG };

/* Process-wide; engines set it at creation while other engines' workers log. */
extern _Atomic int xi_log_level;

void xi_log_emit(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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
