/* The shm ceiling: one core copying the bytes a single-write row moves,
 * slot by slot over the same buffer sizes. shm moves data by copying (CMA or
 * its bounce buffers), so no shm figure can beat this. */
#include <errno.h>
#include <string.h>

#include "bench_impl.h"

/* Copies are timed in batches: a clock read per 1 KiB copy would cost
 * as much as the copy. */
#define BATCH_BYTES (1u << 20)

int memcpy_run(const struct bench_case *c, const struct limits *lim, struct meas *m)
{
	struct layout l;
	int ret = layout_make(c, &l);
	if (ret)
		return ret;
	uint8_t *src = bench_alloc(l.src_len), *dst = bench_alloc(l.dst_len);
	if (!src || !dst) {
		ret = -ENOMEM;
		goto out;
	}
	pattern_fill(src, 0, l.src_len, c->seed);
	uint64_t batch = c->bytes >= BATCH_BYTES ? 1 : BATCH_BYTES / c->bytes, seq = 0;
	for (int timed = 0; timed < 2; timed++) {
		uint64_t iters = timed ? lim->iters : lim->warm_iters;
		uint64_t ns = timed ? lim->ns : lim->warm_ns, n = 0;
		uint64_t start = bench_now_ns(), now = start;
		while (!((iters && n >= iters) || (ns && now - start >= ns && n))) {
			for (uint64_t b = 0; b < batch && !(iters && n >= iters); b++, n++, seq++) {
				uint64_t off = layout_slot_off(c, &l, seq);
				memcpy(dst + off, src + off, c->bytes);
			}
			/* Keeps the compiler from dropping copies nobody reads. */
			__asm__ volatile("" : : "r"(dst) : "memory");
			now = bench_now_ns();
		}
		if (timed) {
			m->calls = m->wrs = n;
			m->bytes = n * c->bytes;
			m->t_ns = now - start;
			m->peak_bps = m->t_ns ? (double)m->bytes * 1e9 / (double)m->t_ns : 0;
		}
	}
	m->posted_all = seq;
	if (c->verify) {
		ret = verify_dst(c, &l, dst, seq);
		m->verified = !ret;
	}
out:
	bench_free(src, l.src_len);
	bench_free(dst, l.dst_len);
	layout_free(&l);
	return ret;
}
