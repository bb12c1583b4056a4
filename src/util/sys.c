#include "util/sys.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t xi_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xi_deadline_after_ms(uint64_t ms)
{
	if (ms == 0 || ms > UINT64_MAX / 2000000ull)
		return UINT64_MAX;
	return xi_now_ns() + ms * 1000000ull;
}

void xi_futex_wake_all(atomic_uint *word)
{
	syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

int xi_futex_wait_ms(atomic_uint *word, unsigned expected, uint64_t timeout_ms)
{
	struct timespec ts = {.tv_sec = (time_t)(timeout_ms / 1000),
			      .tv_nsec = (long)(timeout_ms % 1000) * 1000000L};
	if (syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0))
		return -errno;
	return 0;
}

/* XFER_SPIN_YIELD=0 or 1 decides; otherwise machines of at most 4 online
 * CPUs yield (a same-host pair of engines alone runs four busy threads). */
static bool spin_yields_now(void)
{
	const char *v = getenv("XFER_SPIN_YIELD");
	if (v && (v[0] == '0' || v[0] == '1') && !v[1])
		return v[0] == '1';
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 && n <= 4;
}

bool xi_spin_yields(void)
{
	/* 0 unknown, 1 no, 2 yes: racing first callers compute the same. */
	static atomic_int cached;
	int c = atomic_load_explicit(&cached, memory_order_relaxed);
	if (!c) {
		c = spin_yields_now() ? 2 : 1;
		atomic_store_explicit(&cached, c, memory_order_relaxed);
	}
	return c == 2;
}
