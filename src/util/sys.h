/* Clocks, futexes and the CPU's spin hint: the few system services every
 * layer above uses. No engine state here. */
#ifndef XFER_UTIL_SYS_H
#define XFER_UTIL_SYS_H

#include <stdatomic.h>
#include <stdbool.h>
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
/* A byte count from the environment's syntax: a number (decimal, 0x hex,
 * 0 octal) with an optional K, M or G suffix (either case), as large as a
 * uint64_t gets when it would overflow. *end points past what was read. */
uint64_t xi_parse_bytes(const char *s, char **end);
/* 64 bits from the kernel's CSPRNG (getrandom, else /dev/urandom). Only
 * when neither works (no such kernel here) a mix of clocks and addresses:
 * then *strong is false and the caller must not rely on secrecy. */
uint64_t xi_random_u64(bool *strong);
void xi_futex_wake_all(atomic_uint *word);
/* Sleeps while *word == expected, at most timeout_ms; 0 or -errno. */
int xi_futex_wait_ms(atomic_uint *word, unsigned expected, uint64_t timeout_ms);

static inline void xi_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* Statistics are relaxed counters: readers want a figure, not an order.
 * Each has one writer (the engine's worker), so a plain load and store
 * suffice: no locked read-modify-write on every operation. */
static inline void xi_stat_add(atomic_uint_fast64_t *c, uint64_t by)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

/* The same, by the name the telemetry and engine counters use: a counter
 * with one writer (the worker), never one that two threads write. */
static inline void xi_stat_own_add(atomic_uint_fast64_t *c, uint64_t by)
{
	xi_stat_add(c, by);
}

/* Whether a spinning thread should give its CPU away (sched_yield) rather
 * than pause: on machines of few CPUs the thread it waits for may need this
 * one; with cores to spare the yield is only a system call between a
 * waiter and the news it waits for. Computed once per process. */
bool xi_spin_yields(void);
/* Whether the busy-poll waits (the application's xfer_cq_wait and
 * xfer_recv_wait, the worker's reply watch) pause between polls: yes unless
 * XFER_SPIN_PAUSE=0. Without it a poll follows the line's arrival sooner
 * (a pause takes about 140 cycles on Skylake and later Xeons, by Intel's
 * optimization manual), at the price of a thread that competes harder with
 * a hyperthread sibling. Computed once per process. */
bool xi_spin_pauses(void);

#endif
