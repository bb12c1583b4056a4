/* What a backend leaves NULL in its ops table. */
#include "backend/backend.h"

#include <errno.h>

static int stub_open(struct xfer_nic *n, const char *p, const char *d)
{
	(void)n, (void)p, (void)d;
	return -EOPNOTSUPP;
}
static void stub_shutdown(struct xfer_nic *n)
{
	(void)n;
}
static void stub_close(struct xfer_nic *n)
{
	(void)n;
}
static int stub_mr_reg(struct xfer_nic *n, void *b, size_t l, uint64_t k, unsigned a,
		       const struct nic_mem *m, struct nic_mr *o)
{
	(void)n, (void)b, (void)l, (void)k, (void)a, (void)m, (void)o;
	return -EOPNOTSUPP;
}
static void stub_mr_dereg(struct xfer_nic *n, struct nic_mr *m)
{
	(void)n, (void)m;
}
static int stub_av_insert(struct xfer_nic *n, const void *a, size_t l, uint64_t *d)
{
	(void)n, (void)a, (void)l, (void)d;
	return -EOPNOTSUPP;
}
static int stub_av_remove(struct xfer_nic *n, uint64_t d)
{
	(void)n, (void)d;
	return -EOPNOTSUPP;
}
static int stub_post_send(struct xfer_nic *n, uint64_t d, const void *b, size_t l, void *de, void *c)
{
	(void)n, (void)d, (void)b, (void)l, (void)de, (void)c;
	return -EOPNOTSUPP;
}
static int stub_post_recv(struct xfer_nic *n, void *b, size_t l, void *d, void *c)
{
	(void)n, (void)b, (void)l, (void)d, (void)c;
	return -EOPNOTSUPP;
}
static int stub_post_write(struct xfer_nic *n, const struct nic_write *w, void *c)
{
	(void)n, (void)w, (void)c;
	return -EOPNOTSUPP;
}
static int stub_poll(struct xfer_nic *n, struct nic_event *e, int m)
{
	(void)n, (void)e, (void)m;
	return 0;
}
static int stub_wait_fd(struct xfer_nic *n)
{
	(void)n;
	return -1;
}
static int stub_trywait(struct xfer_nic *n)
{
	(void)n;
	return 0;
}

static int stub_src_is(struct xfer_nic *n, uint64_t s, uint64_t d)
{
	(void)n, (void)s, (void)d;
	return -EOPNOTSUPP;
}

void xi_backend_fill_stubs(struct backend_ops *o)
{
#define FILL(slot) \
	if (!o->slot)  \
	o->slot = stub_##slot
	FILL(open);
	FILL(shutdown);
	FILL(close);
	FILL(mr_reg);
	FILL(mr_dereg);
	FILL(av_insert);
	FILL(av_remove);
	FILL(post_send);
	FILL(post_recv);
	FILL(post_write);
	FILL(poll);
	FILL(wait_fd);
	FILL(trywait);
	FILL(src_is);
#undef FILL
}
