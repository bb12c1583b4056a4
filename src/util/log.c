#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

_Atomic int xi_log_level = XFER_LOG_WARN;

void xi_log_emit(int level, const char *fmt, ...)
{
	static const char *names[] = {"error", "warn", "info", "debug"};
	char line[512];
	va_list ap;
	int n = snprintf(line, sizeof(line), "xfer[%d] %s: ", (int)getpid(),
			 names[level < 0 ? 0 : level > 3 ? 3 : level]);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One fputs per line so that lines of different threads do not interleave. */
	fprintf(stderr, "%s\n", line);
}
