/* Loading libibverbs with dlopen; see ibv_api.h for why. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "util/log.h"
#include "backend/ibv/ibv_api.h"

static struct ibv_api api;
static int api_state; /* 1 loaded, -1 unavailable */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const struct ibv_api *fake;

/* The inline data-path calls of verbs.h, as functions for the table. */
static int do_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}
static int do_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return ibv_post_recv(qp, wr, bad);
}
static int do_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return ibv_post_srq_recv(srq, wr, bad);
}
static int do_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, n, wc);
}
static int do_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return ibv_req_notify_cq(cq, solicited_only);
}

#define SYM(field, name)                                               \
	do {                                                           \
		*(void **)&api.field = dlsym(lib, name);               \
		if (!api.field) {                                      \
			xinfo("libibverbs lacks %s: no RDMA backend", name); \
			dlclose(lib);                                  \
			return;                                        \
		}                                                      \
	} while (0)
#define OPT(field, name) (*(void **)&api.field = dlsym(lib, name))

static void load(void)
{
	api_state = -1;
	/* XFER_IBVERBS_LIB: another libibverbs (a non-standard install; tests
	 * name a missing one to see libxfer without rdma-core). */
	const char *path = getenv("XFER_IBVERBS_LIB");
	void *lib = dlopen(path && *path ? path : "libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		xdbg("no libibverbs: %s", dlerror());
		return;
	}
	SYM(get_device_list, "ibv_get_device_list");
	SYM(free_device_list, "ibv_free_device_list");
	SYM(get_device_name, "ibv_get_device_name");
	SYM(open_device, "ibv_open_device");
	SYM(close_device, "ibv_close_device");
	SYM(query_device, "ibv_query_device");
	SYM(query_port, "ibv_query_port");
	SYM(query_gid, "ibv_query_gid");
	SYM(alloc_pd, "ibv_alloc_pd");
	SYM(dealloc_pd, "ibv_dealloc_pd");
	SYM(reg_mr, "ibv_reg_mr");
	SYM(dereg_mr, "ibv_dereg_mr");
	SYM(create_comp_channel, "ibv_create_comp_channel");
	SYM(destroy_comp_channel, "ibv_destroy_comp_channel");
	SYM(create_cq, "ibv_create_cq");
	SYM(destroy_cq, "ibv_destroy_cq");
	SYM(get_cq_event, "ibv_get_cq_event");
	SYM(ack_cq_events, "ibv_ack_cq_events");
	SYM(create_srq, "ibv_create_srq");
	SYM(destroy_srq, "ibv_destroy_srq");
	SYM(create_qp, "ibv_create_qp");
	SYM(modify_qp, "ibv_modify_qp");
	SYM(destroy_qp, "ibv_destroy_qp");
	SYM(create_ah, "ibv_create_ah");
	SYM(destroy_ah, "ibv_destroy_ah");
	SYM(get_async_event, "ibv_get_async_event");
	SYM(ack_async_event, "ibv_ack_async_event");
	SYM(wc_status_str, "ibv_wc_status_str");
	OPT(query_gid_ex, "_ibv_query_gid_ex");
	OPT(reg_mr_iova2, "ibv_reg_mr_iova2");
	OPT(reg_dmabuf_mr, "ibv_reg_dmabuf_mr");
	api.post_send = do_post_send;
	api.post_recv = do_post_recv;
	api.post_srq_recv = do_post_srq_recv;
	api.poll_cq = do_poll_cq;
	api.req_notify_cq = do_req_notify_cq;
	api_state = 1;
}

const struct ibv_api *xi_ibv_api_get(void)
{
	if (fake)
		return fake;
	pthread_once(&once, load);
	return api_state == 1 ? &api : NULL;
}

void xi_ibv_api_override(const struct ibv_api *f)
{
	fake = f;
}
