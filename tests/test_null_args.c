/* Every public function given NULL where it takes a pointer (docs/api.md,
 * "NULL arguments"): the int-returning ones answer -EINVAL, the others are
 * no-ops or return their documented empty value. Run under ASan/UBSan, a
 * crash or a read through NULL fails the test. One engine with no peers
 * gives the functions that need a valid engine alongside a NULL. */
#include <errno.h>
#include <string.h>

#include "helpers.h"

#define EXPECT(call, want)                                                                          \
	do {                                                                                        \
		long long got_ = (long long)(call);                                                 \
		if (got_ != (long long)(want)) {                                                    \
			fprintf(stderr, "%s:%d: %s = %lld, want %lld\n", __FILE__, __LINE__, #call, got_, \
				(long long)(want));                                                 \
			exit(1);                                                                    \
		}                                                                                   \
	} while (0)

static void with_no_engine(void)
{
	struct xfer_completion c = {0};
	xfer_peer_t p = 0;
	xfer_mr_t *mr = NULL;
	xfer_rmr_t *rmr = NULL;
	xfer_group_t *g = NULL;
	xfer_watcher_t *w = NULL;
	uint8_t buf[64];
	struct xfer_cqe cqe;
	struct xfer_msg_info info;
	struct xfer_nic_info ni;
	struct xfer_write wr = {0};
	struct xfer_paged_write pw = {0};
	struct xfer_scatter sc = {0};
	struct xfer_trace tr;

	xfer_attr_init(NULL);
	EXPECT(xfer_engine_create(NULL, NULL), -EINVAL);
	xfer_engine_stop(NULL);
	xfer_engine_destroy(NULL);
	EXPECT(xfer_engine_id(NULL), 0);
	CHECK(xfer_engine_provider(NULL) && !strcmp(xfer_engine_provider(NULL), ""));
	EXPECT(xfer_engine_nic_count(NULL), 0);
	CHECK(xfer_engine_nic_name(NULL, 0) == NULL);
	EXPECT(xfer_engine_nic_info(NULL, 0, &ni), -EINVAL);
	EXPECT(xfer_engine_addr(NULL, buf, sizeof(buf), NULL), -EINVAL);
	EXPECT(xfer_peer_add(NULL, buf, sizeof(buf), &p), -EINVAL);
	EXPECT(xfer_peer_remove(NULL, 0), -EINVAL);
	EXPECT(xfer_peer_id(NULL, 0), 0);
	EXPECT(xfer_peer_state(NULL, 0), -ENOENT);
	EXPECT(xfer_peer_shards(NULL, 0), 0);
	EXPECT(xfer_mr_reg(NULL, buf, sizeof(buf), &mr), -EINVAL);
	EXPECT(xfer_mr_is_gpu(NULL), -1);
	EXPECT(xfer_mr_dereg(NULL), -EINVAL);
	EXPECT(xfer_mr_revoke(NULL), -EINVAL);
	EXPECT(xfer_mr_desc(NULL, buf, sizeof(buf), NULL), -EINVAL);
	CHECK(xfer_mr_addr(NULL) == NULL);
	EXPECT(xfer_mr_len(NULL), 0);
	EXPECT(xfer_rmr_import(NULL, 0, buf, sizeof(buf), &rmr), -EINVAL);
	xfer_rmr_free(NULL);
	EXPECT(xfer_rmr_len(NULL), 0);
	EXPECT(xfer_send(NULL, 0, buf, 1, &c), -EINVAL);
	EXPECT(xfer_write(NULL, &wr, &c), -EINVAL);
	EXPECT(xfer_write_paged(NULL, &pw, &c), -EINVAL);
	EXPECT(xfer_write_imm(NULL, 0, 1, &c), -EINVAL);
	EXPECT(xfer_group_create(NULL, &p, 1, &g), -EINVAL);
	EXPECT(xfer_group_destroy(NULL), 0);
	EXPECT(xfer_group_size(NULL), 0);
	EXPECT(xfer_scatter(NULL, g, &sc, &c), -EINVAL);
	EXPECT(xfer_barrier(NULL, g, 1, &c), -EINVAL);
	EXPECT(xfer_cancel(NULL, 1, &c), -EINVAL);
	EXPECT(xfer_expect_imm(NULL, 1, 1, &c), -EINVAL);
	EXPECT(xfer_imm_disarm(NULL, 1, NULL), -EINVAL);
	EXPECT(xfer_cq_poll(NULL, &cqe, 1), -EINVAL);
	EXPECT(xfer_cq_wait(NULL, &cqe, 1, 1), -EINVAL);
	EXPECT(xfer_recv(NULL, buf, sizeof(buf), &info), -EINVAL);
	EXPECT(xfer_recv_wait(NULL, buf, sizeof(buf), &info, 1), -EINVAL);
	EXPECT(xfer_watcher_create(NULL, NULL, 0, &w), -EINVAL);
	EXPECT(xfer_watcher_create(NULL, NULL, 0, NULL), -EINVAL);
	xfer_watcher_destroy(NULL);
	CHECK(xfer_watcher_word(NULL) == NULL);
	EXPECT(xfer_watcher_device_ptr(NULL), 0);
	EXPECT(xfer_topology(NULL, 4), -EINVAL);
	/* xfer_topology(NULL, 0) counts devices: it loads hwloc, whose plugins
	 * LeakSanitizer reports, so it is left to python/tests/test_misc.py. */
	EXPECT(xfer_topology(NULL, -1), -EINVAL);
	EXPECT(xfer_topology_nics_for_gpu(0, NULL, 16), -EINVAL);
	struct xfer_stats st;
	memset(&st, 0xff, sizeof(st));
	xfer_engine_stats(NULL, &st); /* zeroes out */
	EXPECT(st.ops_submitted, 0);
	xfer_engine_stats(NULL, NULL);
	xfer_engine_trace(NULL, 1);
	EXPECT(xfer_trace_read(NULL, &tr, 1), -EINVAL);
	CHECK(xfer_strerror(0) != NULL);
	CHECK(xfer_version() != NULL);
	xfer_log_set_handler(NULL, NULL);           /* back to stderr */
}

static void with_engine(void)
{
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	struct xfer_completion c = {0};
	uint8_t buf[64];
	size_t need = 0;
	xfer_peer_t p = 0;
	EXPECT(xfer_engine_nic_info(e, 0, NULL), -EINVAL);
	CHECK(xfer_engine_addr(e, NULL, 0, &need) == -ENOSPC && need > 0);
	EXPECT(xfer_engine_addr(e, NULL, 16, NULL), -EINVAL);
	EXPECT(xfer_peer_add(e, NULL, 16, &p), -EINVAL);
	EXPECT(xfer_peer_add(e, buf, sizeof(buf), NULL), -EINVAL);
	EXPECT(xfer_mr_reg(e, NULL, 64, &(xfer_mr_t *){NULL}), -EINVAL);
	EXPECT(xfer_mr_reg(e, buf, sizeof(buf), NULL), -EINVAL);
	EXPECT(xfer_rmr_import(e, 0, NULL, 16, &(xfer_rmr_t *){NULL}), -EINVAL);
	EXPECT(xfer_send(e, 0, NULL, 1, &c), -EINVAL);
	EXPECT(xfer_write(e, NULL, &c), -EINVAL);
	EXPECT(xfer_write_paged(e, NULL, &c), -EINVAL);
	EXPECT(xfer_group_create(e, NULL, 1, &(xfer_group_t *){NULL}), -EINVAL);
	EXPECT(xfer_scatter(e, NULL, &(struct xfer_scatter){0}, &c), -EINVAL);
	EXPECT(xfer_barrier(e, NULL, 1, &c), -EINVAL);
	EXPECT(xfer_cq_poll(e, NULL, 1), -EINVAL);
	EXPECT(xfer_cq_wait(e, NULL, 1, 1), -EINVAL);
	EXPECT(xfer_recv(e, NULL, 16, NULL), -EINVAL);
	EXPECT(xfer_recv_wait(e, NULL, 16, NULL, 1), -EINVAL);
	EXPECT(xfer_trace_read(e, NULL, 1), -EINVAL);
	xfer_engine_stats(e, NULL);
	/* A region, for the functions that take one next to a NULL. */
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, buf, sizeof(buf), &mr));
	CHECK(xfer_mr_desc(mr, NULL, 0, &need) == -ENOSPC && need > 0);
	EXPECT(xfer_mr_desc(mr, NULL, 16, NULL), -EINVAL);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
}

int main(void)
{
	with_no_engine();
	with_engine();
	fprintf(stderr, "every NULL argument answered\n");
	return 0;
}
