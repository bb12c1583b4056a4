/* The prefiller's public calls: creation, events, and the per-layer hooks
 * through which the application's prefill drives the writes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv_pf.h"

#define DEFAULT_JOB_TIMEOUT_MS 60000

void xfer_kv_pf_config_init(struct xfer_kv_pf_config *c)
{
	memset(c, 0, sizeof(*c));
	c->max_jobs = 64;
	c->job_timeout_ms = DEFAULT_JOB_TIMEOUT_MS;
}

static void free_all(xfer_kv_prefiller_t *p)
{
	if (p->jobs)
		for (uint32_t i = 0; i < p->cfg.max_jobs; i++) {
			struct kv_job *j = &p->jobs[i];
			while (j->used && j->dests) {
				struct kv_dest *d = j->dests;
				j->dests = d->next;
				free(d->dst_pages);
				free(d->plan);
				free(d);
			}
			free(j->src_pages);
		}
	if (p->partials)
		for (uint32_t i = 0; i < p->npartials; i++) {
			free(p->partials[i].pages);
			free(p->partials[i].seen);
			free(p->partials[i].first_msg);
		}
	free(p->partials);
	free(p->jobs);
	free(p->evq);
	free(p->ctx_mem);
	xi_kv_peers_free(&p->core);
	xi_kv_stack_free(&p->free_ctx);
	free(p);
}

int xfer_kv_prefiller_create(const struct xfer_kv_pf_config *cfg, const struct xfer_attr *attr,
			     xfer_kv_prefiller_t **out)
{
	if (!cfg || !attr || !out || !cfg->kv || !cfg->max_jobs || xfer_kv_layout_check(&cfg->layout))
		return -EINVAL;
	xfer_kv_prefiller_t *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cfg = *cfg;
	if (!p->cfg.job_timeout_ms)
		p->cfg.job_timeout_ms = DEFAULT_JOB_TIMEOUT_MS;
	p->jobs = calloc(cfg->max_jobs, sizeof(*p->jobs));
	p->npartials = cfg->max_jobs * 2;
	p->partials = calloc(p->npartials, sizeof(*p->partials));
	if (cfg->ctx_bytes)
		p->ctx_mem = malloc((size_t)cfg->ctx_bytes * cfg->max_jobs);
	if (!p->jobs || !p->partials || (cfg->ctx_bytes && !p->ctx_mem) ||
	    xi_kv_stack_init(&p->free_ctx, cfg->max_jobs)) {
		free_all(p);
		return -ENOMEM;
	}
	p->core.owner = p;
	p->core.on_item = xi_kv_pf_on_item;
	p->core.on_tick = xi_kv_pf_on_tick;
	int ret = xi_kv_core_start(&p->core, attr);
	if (!ret)
		ret = xfer_mr_reg(p->core.e, cfg->kv, xfer_kv_layout_bytes(&cfg->layout), &p->kv_mr);
	if (!ret && p->ctx_mem)
		ret = xfer_mr_reg(p->core.e, p->ctx_mem, (size_t)cfg->ctx_bytes * cfg->max_jobs, &p->ctx_mr);
	if (ret) {
		xi_kv_core_stop(&p->core);
		xfer_engine_destroy(p->core.e);
		free_all(p);
		return ret;
	}
	*out = p;
	return 0;
}

void xfer_kv_prefiller_destroy(xfer_kv_prefiller_t *p)
{
	if (!p)
		return;
	xi_kv_core_stop(&p->core);
	/* Imported regions belong to the engine's peers; destroy frees them. */
	for (uint32_t i = 0; i < p->cfg.max_jobs; i++)
		for (struct kv_dest *d = p->jobs[i].used ? p->jobs[i].dests : NULL; d; d = d->next) {
			xfer_rmr_free(d->kv);
			xfer_rmr_free(d->ctx);
		}
	xfer_engine_destroy(p->core.e);
	free_all(p);
}

xfer_engine_t *xfer_kv_prefiller_engine(xfer_kv_prefiller_t *p)
{
	return p ? p->core.e : NULL;
}

int xfer_kv_pf_poll(xfer_kv_prefiller_t *p, struct xfer_kv_pf_event *ev, int max,
		    uint64_t timeout_ms)
{
	if (!p || !ev || max <= 0)
		return -EINVAL;
	uint64_t until = xi_kv_now_ns() + timeout_ms * 1000000ull;
	pthread_mutex_lock(&p->core.mu);
	while (!p->ev_count && xi_kv_now_ns() < until) {
		struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
				      .tv_nsec = (long)(until % 1000000000ull)};
		pthread_cond_timedwait(&p->core.app_cv, &p->core.mu, &ts);
	}
	int n = 0;
	while (n < max && p->ev_count) {
		ev[n++] = p->evq[p->ev_head];
		p->ev_head = (p->ev_head + 1) % p->ev_cap;
		p->ev_count--;
	}
	pthread_mutex_unlock(&p->core.mu);
	return n;
}

int xfer_kv_pf_bind(xfer_kv_prefiller_t *p, uint64_t id, const uint32_t *pages, uint32_t n)
{
	if (!p || !pages || !n || n > KV_NPAGES_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (pages[i] >= p->cfg.layout.pages)
			return -EINVAL;
	uint32_t *copy = malloc((size_t)n * sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	memcpy(copy, pages, (size_t)n * sizeof(*copy));
	pthread_mutex_lock(&p->core.mu);
	struct kv_job *j = xi_kv_pf_job_find(p, id);
	int ret = 0;
	if (!j && xi_kv_pf_tomb_has(p, TOMB_JOB, 0, id))
		ret = -ESTALE;
	else if (!j && !(j = xi_kv_pf_job_new(p, id)))
		ret = -EBUSY;
	else if (j->bound)
		ret = -EALREADY;
	else if (j->npages && j->npages != n)
		ret = -EINVAL;
	if (!ret) {
		j->src_pages = copy;
		j->npages = n;
		j->bound = true;
		copy = NULL;
		xi_kv_pf_pump_job(p, j);
	}
	pthread_mutex_unlock(&p->core.mu);
	free(copy);
	return ret;
}

int xfer_kv_pf_layers_done(xfer_kv_prefiller_t *p, uint64_t id, uint32_t layers)
{
	if (!p || layers > p->cfg.layout.layers)
		return -EINVAL;
	pthread_mutex_lock(&p->core.mu);
	struct kv_job *j = xi_kv_pf_job_find(p, id);
	if (j && layers > j->layers_ready) {
		j->layers_ready = layers;
		xi_kv_pf_pump_job(p, j);
	}
	pthread_mutex_unlock(&p->core.mu);
	return j ? 0 : -ENOENT;
}

int xfer_kv_pf_finish(xfer_kv_prefiller_t *p, uint64_t id, const void *ctx, uint32_t len)
{
	if (!p || len > p->cfg.ctx_bytes || (len && !ctx))
		return -EINVAL;
	pthread_mutex_lock(&p->core.mu);
	struct kv_job *j = xi_kv_pf_job_find(p, id);
	int ret = !j ? -ENOENT : j->finished ? -EALREADY : !j->bound ? -EINVAL : 0;
	if (!ret) {
		if (len)
			memcpy(p->ctx_mem + (size_t)j->ctx_slot * p->cfg.ctx_bytes, ctx, len);
		j->ctx_len = len;
		j->finished = true;
		j->layers_ready = p->cfg.layout.layers;
		xi_kv_pf_pump_job(p, j);
		if (j->used)
			xi_kv_pf_job_check(p, j);
	}
	pthread_mutex_unlock(&p->core.mu);
	return ret;
}

int xfer_kv_pf_leave(xfer_kv_prefiller_t *p)
{
	if (!p)
		return -EINVAL;
	pthread_mutex_lock(&p->core.mu);
	p->leaving = true;
	pthread_mutex_unlock(&p->core.mu);
	xi_kv_core_kick(&p->core);
	return 0;
}

void xfer_kv_pf_stats(xfer_kv_prefiller_t *p, struct xfer_kv_pf_stats *out)
{
	pthread_mutex_lock(&p->core.mu);
	*out = p->st;
	out->msgs_dropped += __atomic_load_n(&p->core.dropped, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&p->core.mu);
}
