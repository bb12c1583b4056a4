#include "util/log.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

_Atomic int xi_log_level = XFER_LOG_WARN;

/* The handler and its ctx change together, and a setter must be able to
 * free the old ctx once it returns: loggers hold the read side for the whole
 * call, the setter takes the write side. Logging is off the data path (an
 * error, or a level the user asked for), so a lock here costs nothing that
 * matters. */
static pthread_rwlock_t handler_lock = PTHREAD_RWLOCK_INITIALIZER;
static xfer_log_fn handler;
static void *handler_ctx;

void xfer_log_set_handler(xfer_log_fn fn, void *ctx)
{
	pthread_rwlock_wrlock(&handler_lock);
	handler = fn;
	handler_ctx = ctx;
	pthread_rwlock_unlock(&handler_lock);
}

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void xi_log_emit(int level, const char *fmt, ...)
{
	if (level < XFER_LOG_ERROR)
		level = XFER_LOG_ERROR;
	if (level > XFER_LOG_DEBUG)
		level = XFER_LOG_DEBUG;
	char line[512];
	int n = snprintf(line, sizeof(line), "xfer[%d] %s: ", (int)getpid(), level_names[level]);
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	pthread_rwlock_rdlock(&handler_lock);
	if (handler)
		handler(handler_ctx, level, line + n); /* the handler adds its own prefix */
	else
		fprintf(stderr, "%s\n", line); /* one call per line: lines do not interleave */
	pthread_rwlock_unlock(&handler_lock);
}

int xi_log_parse_level(const char *v, int *out)
{
	static const struct {
		const char *name;
		int level;
	} names[] = {{"error", XFER_LOG_ERROR}, {"warn", XFER_LOG_WARN}, {"warning", XFER_LOG_WARN},
		     {"info", XFER_LOG_INFO},   {"debug", XFER_LOG_DEBUG}};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcasecmp(v, names[i].name)) {
			*out = names[i].level;
			return 0;
		}
	}
	char *end;
	errno = 0;
	long x = strtol(v, &end, 0);
	if (!*v || *end || errno || x < INT_MIN || x > INT_MAX)
		return -EINVAL;
	*out = (int)x;
	return 0;
}
