/* Module messages out: each SEND owns its buffer until it completes, and a
 * full submission queue leaves it on a list the control thread retries. */
#include <errno.h>
#include <stdlib.h>

#include "kv_core.h"

static int post(struct kv_core *c, struct kv_sendbuf *b)
{
	struct xfer_completion done = xi_kv_completion(c, (uint64_t)(uintptr_t)b, 0, 0);
	return xfer_send(c->e, b->peer, b->data, b->len, &done);
}

int xi_kv_send(struct kv_core *c, xfer_peer_t peer, const struct kv_msg *m, const uint32_t *pages)
{
	size_t cap = c->attr.msg_max;
	struct kv_sendbuf *b = malloc(sizeof(*b) + cap);
	if (!b)
		return -ENOMEM;
	b->next = NULL;
	b->peer = peer;
	b->type = m->type;
	b->dseq = m->dseq;
	b->engine_id = xfer_peer_id(c->e, peer);
	int len = xi_kv_msg_encode(m, pages, b->data, cap);
	if (len < 0) {
		free(b);
		return len;
	}
	b->len = (size_t)len;
	int ret = c->pend_head ? -EAGAIN : post(c, b);
	if (ret == -EAGAIN) {
		/* Behind earlier ones, so that messages leave in the order sent. */
		if (c->pend_tail)
			c->pend_tail->next = b;
		else
			c->pend_head = b;
		c->pend_tail = b;
		return 0;
	}
	if (ret)
		free(b);
	return ret;
}

bool xi_kv_send_pending(struct kv_core *c)
{
	while (c->pend_head) {
		struct kv_sendbuf *b = c->pend_head;
		int ret = post(c, b);
		if (ret == -EAGAIN)
			return true;
		c->pend_head = b->next;
		if (!c->pend_head)
			c->pend_tail = NULL;
		b->next = NULL;
		if (ret) {
			/* The owner learns of it as it would of a failed SEND. */
			struct xfer_cqe cqe = {.user_data = (uint64_t)(uintptr_t)b, .res = ret,
					       .kind = XFER_OP_SEND};
			xi_kv_core_cb(c, &cqe);
		}
	}
	return false;
}
