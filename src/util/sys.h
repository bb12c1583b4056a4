/* Clocks, futexes and the CPU's spin hint: the few system services every
 * layer above uses. No engine state here. */
#ifndef XFER_UTIL_SYS_H
#define XFER_UTIL_SYS_H

#include <stdatomic.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds (vDSO: no system call). */
uint64_t xi_now_ns(void);
/* The absolute deadline ms from now; UINT64_MAX for 0 (none) or overflow. */
uint64_t xi_deadline_after_ms(uint64_t ms);
/* The same from a clock already read: no second clock call. */
static inline uint64_t xi_deadline_from(uint64_t now, uint64_t ms)
{
	if (ms == 0 || ms > UINT64_MAX / 2000000ull)
		return UINT64_MAX;
	return now + ms * 1000000ull;
}
void xi_futex_wake_all(atomic_uint *word);
/* Sleeps while *word == expected, at most timeout_ms; 0 or -errno. */
int xi_futex_wait_ms(atomic_uint *word, unsigned expected, uint64_t timeout_ms);

static inline void xi_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Statistics are relaxed counters: readers want a figure, not an order. */
static inline void xi_stat_add(atomic_uint_fast64_t *c, uint64_t by)
{
	atomic_fetch_add_explicit(c, by, memory_order_relaxed);
}

/* A counter with one writer (the worker): a relaxed load and store, which is
 * a plain add on every target (no locked instruction), while readers on
 * other threads still load it without a data race. Never for a counter two
 * threads write. */
static inline void xi_stat_own_add(atomic_uint_fast64_t *c, uint64_t by)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

#endif
