#include "util/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <linux/futex.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t xi_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xi_random_u64(bool *strong)
{
	uint64_t v = 0;
	ssize_t got;
	do
		got = getrandom(&v, sizeof(v), 0);
	while (got < 0 && errno == EINTR);
	if (got == (ssize_t)sizeof(v))
		goto ok;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		got = read(fd, &v, sizeof(v));
		close(fd);
		if (got == (ssize_t)sizeof(v))
			goto ok;
	}
	if (strong)
		*strong = false;
	v = (xi_now_ns() * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)&v ^ ((uint64_t)getpid() << 40);
	return v;
ok:
	if (strong)
		*strong = true;
	return v;
}

uint64_t xi_deadline_after_ms(uint64_t ms)
{
	return ms == 0 ? UINT64_MAX : xi_deadline_from(xi_now_ns(), ms);
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

/* Cached as xi_spin_yields is: 0 unknown, 1 no, 2 yes. */
static bool cached_flag(atomic_int *cached, bool (*now)(void))
{
	int c = atomic_load_explicit(cached, memory_order_relaxed);
	if (!c) {
		c = now() ? 2 : 1;
		atomic_store_explicit(cached, c, memory_order_relaxed);
	}
	return c == 2;
}

/* XFER_SPIN_PAUSE=0: no pause hint in the busy-poll waits. */
static bool spin_pauses_now(void)
{
	const char *v = getenv("XFER_SPIN_PAUSE");
	return !(v && v[0] == '0' && !v[1]);
}

bool xi_spin_pauses(void)
{
	static atomic_int cached;
	return cached_flag(&cached, spin_pauses_now);
}

bool xi_spin_yields(void)
{
	/* Racing first callers compute the same. */
	static atomic_int cached;
	return cached_flag(&cached, spin_yields_now);
}

uint64_t xi_parse_bytes(const char *s, char **end)
{
	unsigned long long v = strtoull(s, end, 0);
	unsigned shift = 0;
	if (**end == 'k' || **end == 'K')
		shift = 10;
	else if (**end == 'm' || **end == 'M')
		shift = 20;
	else if (**end == 'g' || **end == 'G')
		shift = 30;
	if (shift)
		(*end)++;
	return v > (ULLONG_MAX >> shift) ? UINT64_MAX : (uint64_t)v << shift;
}
