/* Finding and opening one libfabric NIC: an RDM endpoint with MSG and RMA and
 * remote CQ data, whatever mr_mode the provider insists on. Nothing here is
 * specific to one provider: behaviour follows the bits the provider returns. */

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

#include "util/log.h"
#include "backend/ibv/ibv_backend.h"
#include "backend/ofi/ofi.h"
#include "xfer.h"

int xi_ofi_errno(int ret)
{
	if (ret >= 0)
		return ret;
	int e = -ret;
	if (e < 256)
		return ret;
	switch (e) {
	case FI_ETRUNC:
		return -EMSGSIZE;
	case FI_ENOKEY:
	case FI_EKEYREJECTED:
		return -EACCES;
	case FI_ETOOSMALL:
		return -ENOSPC;
	case FI_EOPBADSTATE:
		return -EBADFD;
	case FI_ENOCQ:
	case FI_ENOEQ:
	case FI_ENOAV:
		return -ENXIO;
	default:
		return -XFER_EFABRIC;
	}
}

/* "ofi-NAME" asks for libfabric's NAME explicitly (e.g. "ofi-shm", since
 * "shm" selects xfer's own same-host backend); the NIC then reports the
 * name as asked, so that peers of the two shm backends never mix. */
static const char *explicit_ofi(const char *p)
{
	return p && !strncmp(p, "ofi-", 4) && p[4] ? p + 4 : NULL;
}

static const char *expand_provider(const char *p)
{
	if (explicit_ofi(p))
		p = explicit_ofi(p);
	if (!strcmp(p, "tcp"))
		return "tcp;ofi_rxm";
	if (!strcmp(p, "verbs"))
		return "verbs;ofi_rxm";
	return p;
}

static struct fi_info *make_hints(const char *prov, uint64_t op_flags, bool hmem, bool source)
{
	struct fi_info *h = fi_allocinfo();
	if (!h)
		return NULL;
	h->caps = FI_MSG | FI_RMA | (hmem ? FI_HMEM : 0) | (source ? FI_SOURCE : 0);
	h->ep_attr->type = FI_EP_RDM;
	/* We can supply a context per request, so providers that need one work. */
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	/* FI_MR_HMEM: we register device buffers and always pass their desc. */
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				  FI_MR_ENDPOINT | (hmem ? FI_MR_HMEM : 0);
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->tx_attr->op_flags = op_flags;
	h->fabric_attr->prov_name = strdup(prov);
	return h;
}

/* Providers whose delivery-complete mode is worse than none. shm 1.17 never
 * completes a write that the target rejects (bad key) when asked for
 * delivery-complete, and the endpoint stops completing anything after it;
 * without it, a rejected write completes as sent (nothing lands). */
static bool delivery_complete_broken(const char *prov)
{
	return !strcmp(prov, "shm");
}

/* Providers not asked for FI_HMEM unless XFER_GPU_NATIVE=1. shm: GPU
 * traffic between processes of one host takes our CUDA IPC path, and with
 * FI_HMEM shm 1.17 handles a write into a revoked region differently (the
 * Python pair test then sees the writer's peer declared dead). */
static bool hmem_unwanted(const char *prov)
{
	return !strcmp(prov, "shm");
}

/* The first NIC of one provider's list that suits us. */
static struct fi_info *first_usable(struct fi_info *list, const char *prov, const char *domain)
{
	for (struct fi_info *fi = list; fi; fi = fi->next) {
		if (fi->domain_attr->cq_data_size < 4)
			continue;
		/* The provider list holds layered names; an exact match keeps
		 * "tcp;ofi_rxm" from picking a bare "tcp" msg endpoint. */
		if (strcmp(fi->fabric_attr->prov_name, prov) != 0)
			continue;
		if (domain && strcmp(fi->domain_attr->name, domain) != 0)
			continue;
		return fi;
	}
	return NULL;
}

/* Finds the NIC for one provider. FI_HMEM (when wanted) is optional and
 * delivery-complete is preferred: with it a remote write the target rejects
 * is reported to us. Each is dropped in turn when no NIC offers it, FI_HMEM
 * last, so that tcp and shm keep working and a NIC never loses
 * delivery-complete to gain FI_HMEM. XFER_OFI_DELIVERY_COMPLETE=0/1
 * overrides the delivery choice. */
static struct fi_info *query(const char *prov, const char *domain, int want_hmem,
			     struct fi_info **list_out)
{
	bool hmem_first = want_hmem == 2 || (want_hmem == 1 && !hmem_unwanted(prov));
	static const uint64_t tries[] = {FI_DELIVERY_COMPLETE, 0};
	const char *dc = getenv("XFER_OFI_DELIVERY_COMPLETE");
	size_t first = delivery_complete_broken(prov) ? 1 : 0;
	if (dc && *dc)
		first = !strcmp(dc, "0") ? 1 : 0;
	for (int hmem = hmem_first ? 1 : 0; hmem >= 0; hmem--) {
		for (size_t t = first; t < sizeof(tries) / sizeof(tries[0]); t++) {
			/* FI_SOURCE lets the core check who sent a message; a NIC
			 * without it still works, trusting the id a message claims. */
			for (int source = 1; source >= 0; source--) {
				struct fi_info *h = make_hints(prov, tries[t], hmem, source), *list = NULL;
				if (!h)
					return NULL;
				int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &list);
				fi_freeinfo(h);
				struct fi_info *fi = ret == 0 ? first_usable(list, prov, domain) : NULL;
				if (fi) {
					*list_out = list;
					return fi;
				}
				fi_freeinfo(list);
			}
		}
	}
	return NULL;
}

static struct fi_info *pick(const char *provider, const char *domain, int want_hmem,
			    struct fi_info **list_out)
{
	static const char *auto_order[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};
	const char *names[3];
	size_t nnames = 0;
	if (!provider || !*provider || !strcmp(provider, "auto")) {
		for (size_t i = 0; i < 3; i++)
			names[nnames++] = auto_order[i];
	} else {
		names[nnames++] = expand_provider(provider);
	}
	for (size_t i = 0; i < nnames; i++) {
		struct fi_info *fi = query(names[i], domain, want_hmem, list_out);
		if (fi)
			return fi;
	}
	return NULL;
}

/* Reads what the provider still reports until it has been quiet for a
 * while. ofi_rxm 1.17 over verbs processes its connections' completions
 * when the endpoint closes, and crashed there (SIGSEGV in fi_close) when
 * the peer had closed its side at the same moment: each test pair
 * destroying both engines together hit it about one run in three. Without
 * SRX (rxm_srx below) a message that arrives during the close still
 * crashes it (design.md §16.4). */
static void drain_before_close(struct ofi_nic *o)
{
	struct fi_cq_data_entry c[16];
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long quiet_since = 0, now = 0;
	while (now - quiet_since < 50 && now < 500) {
		ssize_t n = fi_cq_read(o->cq, c, 16);
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			fi_cq_readerr(o->cq, &err, 0);
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		now = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		if (n != -FI_EAGAIN)
			quiet_since = now;
	}
}

/* What the CQ still holds once the endpoint is closed (flushed requests of
 * ours, nothing the core waits for any more) is read and dropped, so that
 * the CQ closes empty. */
static void discard_cq(struct ofi_nic *o)
{
	struct fi_cq_data_entry c[16];
	for (int i = 0; i < 1024; i++) {
		ssize_t n = fi_cq_read(o->cq, c, 16);
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			if (fi_cq_readerr(o->cq, &err, 0) != 1)
				return;
		} else if (n <= 0) {
			return;
		}
	}
}

/* The endpoint goes first (libfabric's order: endpoint, then the memory
 * regions bound to it and the CQ/AV it is bound to, then domain and
 * fabric); the core releases its registrations between this and close. */
static void ofi_shutdown(struct xfer_nic *nic)
{
	struct ofi_nic *o = nic->priv;
	if (!o || !o->ep)
		return;
	if (o->cq && strstr(o->info->fabric_attr->prov_name, "verbs"))
		drain_before_close(o);
	int ret = fi_close(&o->ep->fid);
	if (ret)
		xwarn("closing the endpoint on %s: %s", nic->domain, fi_strerror(-ret));
	o->ep = NULL;
	if (o->cq)
		discard_cq(o);
}

static void ofi_close(struct xfer_nic *nic)
{
	struct ofi_nic *o = nic->priv;
	if (!o)
		return;
	ofi_shutdown(nic); /* where teardown did not (a failed open) */
	if (o->av)
		fi_close(&o->av->fid);
	if (o->cq)
		fi_close(&o->cq->fid);
	if (o->domain)
		fi_close(&o->domain->fid);
	if (o->fabric)
		fi_close(&o->fabric->fid);
	if (o->info)
		fi_freeinfo(o->info);
	free(o->dests);
	free(o);
	nic->priv = NULL;
}

/* A worker that never sleeps never reads the CQ's wait fd (backend.h,
 * no_wait); XFER_OFI_CQ_WAIT=1 asks for one anyway (the engine before, for
 * A/B runs), 0 never. */
static bool want_cq_wait(bool no_wait)
{
	const char *v = getenv("XFER_OFI_CQ_WAIT");
	if (v && *v)
		return strcmp(v, "0") != 0;
	return !no_wait;
}

static int open_cq(struct ofi_nic *o, size_t size, bool no_wait)
{
	struct fi_cq_attr attr = {.format = FI_CQ_FORMAT_DATA, .size = size, .wait_obj = FI_WAIT_FD};
	o->wait_fd = -1;
	if (want_cq_wait(no_wait) && fi_cq_open(o->domain, &attr, &o->cq, NULL) == 0) {
		if (fi_control(&o->cq->fid, FI_GETWAIT, &o->wait_fd) == 0)
			return 0;
		fi_close(&o->cq->fid);
		o->wait_fd = -1;
	}
	/* No wait object: the worker dozes with a short timeout instead. */
	attr.wait_obj = FI_WAIT_NONE;
	return fi_cq_open(o->domain, &attr, &o->cq, NULL);
}

/* shm names its queue files /dev/shm/<pid>:<n>:<m>. A process that died
 * without closing its endpoint leaves them behind, and a later process that
 * gets the same pid cannot create its own (-EBUSY). Files named for our pid
 * that this process has not mapped are such leftovers. */
static int remove_stale_shm_files(void)
{
	char prefix[32], maps[1 << 16];
	int plen = snprintf(prefix, sizeof(prefix), "%d:", (int)getpid()), removed = 0;
	size_t mlen = 0;
	FILE *f = fopen("/proc/self/maps", "r");
	if (f) {
		mlen = fread(maps, 1, sizeof(maps) - 1, f);
		fclose(f);
	}
	maps[mlen] = 0;
	DIR *d = opendir("/dev/shm");
	if (!d)
		return 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		char path[300];
		if (strncmp(de->d_name, prefix, (size_t)plen) != 0)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", de->d_name);
		if (strstr(maps, path))
			continue; /* ours, in use */
		if (unlink(path) == 0)
			removed++;
	}
	closedir(d);
	if (removed)
		xwarn("removed %d stale shm file(s) left by an earlier process with our pid", removed);
	return removed;
}

/* ofi_rxm 1.17 gives each endpoint one verbs CQ of (msg tx size + msg rx
 * size) x FI_UNIVERSE_SIZE entries: 128 + 128 by default, times 256, is
 * 65,536, and rxe allows 32,767 (ConnectX about 4 million), so fi_enable
 * fails with -FI_EINVAL. libfabric reads the universe size once, when it
 * initializes, and has no call to set it. So before our first libfabric
 * call, if that call may open verbs and the user chose no universe size, we
 * choose the largest that fits the smallest RDMA device's CQ (the default
 * when it fits). The environment is the only knob; an application that
 * initialized libfabric before us must set FI_UNIVERSE_SIZE itself. */
static size_t env_size(const char *name, size_t def)
{
	const char *v = getenv(name);
	char *end;
	if (!v || !*v)
		return def;
	unsigned long long x = strtoull(v, &end, 0);
	return *end || !x ? def : (size_t)x;
}

static void fit_rxm_cq(void)
{
	if (getenv("FI_UNIVERSE_SIZE"))
		return;
	int cqe = xi_ibv_min_cqe();
	if (cqe <= 0)
		return;
	size_t per = env_size("FI_OFI_RXM_MSG_TX_SIZE", 128) + env_size("FI_OFI_RXM_MSG_RX_SIZE", 128);
	size_t universe = (size_t)cqe / per;
	if (universe >= 256)
		return;
	char v[32];
	snprintf(v, sizeof(v), "%zu", universe ? universe : 1);
	setenv("FI_UNIVERSE_SIZE", v, 0);
	xinfo("FI_UNIVERSE_SIZE=%s: rxm's verbs CQs then fit the device's %d entries", v, cqe);
}

/* libfabric keeps a registration alive after fi_close(mr) in its MR cache
 * (verbs, efa): the old rkey then still writes into the memory, and
 * deregistration and revocation would not protect it (on verbs;ofi_rxm
 * stale_descriptor's write through a dead key succeeded). xfer registers
 * long-lived regions and needs no cache, so it is off unless the user set
 * FI_MR_CACHE_MAX_COUNT; like FI_UNIVERSE_SIZE, read once at init. */
static void no_mr_cache(void)
{
	if (!getenv("FI_MR_CACHE_MAX_COUNT"))
		setenv("FI_MR_CACHE_MAX_COUNT", "0", 0);
}

static bool may_open_verbs(const char *provider)
{
	return !provider || !*provider || !strcmp(provider, "auto") || strstr(provider, "verbs");
}

/* ofi_rxm closes the hidden connection of an address-vector entry on
 * fi_av_remove only with FI_AV_REMOVE_CLEANUP on (libfabric's default is
 * off): that removal is how a verbs connection whose queue pair failed is
 * reset (ofi_conn.c), so it is on where an RDMA device is present, unless
 * the user chose. Also read once, at init. With it, removing a peer closes its connection too: what the peer
 * had in flight to us fails there, and its next request redials. */
static void av_remove_cleanup(void)
{
	if (xi_ibv_min_cqe() > 0) /* only where an RDMA device is there */
		setenv("FI_AV_REMOVE_CLEANUP", "1", 0);
}

/* ofi_rxm 1.17 over verbs frees a connection's verbs endpoint and only then
 * reads the CQ, reposting the connection's receive buffers into the freed
 * endpoint (SIGSEGV) when a message of that peer is still unread: it closes
 * connections itself when a peer disconnects, and handles such events while
 * completions are queued (docs/design.md §16.4). No order of our calls
 * avoids it. With a shared receive context (FI_OFI_RXM_USE_SRX=1) rxm
 * posts its receive buffers there, not to each connection's endpoint, and
 * reposts into the live context: so it is on where an RDMA device is
 * present, unless the user chose. Read once, at init, like the others. */
static void rxm_srx(void)
{
	if (xi_ibv_min_cqe() > 0)
		setenv("FI_OFI_RXM_USE_SRX", "1", 0);
}

/* libfabric's reading of a boolean variable (fi_param_get_bool). */
static bool env_on(const char *name)
{
	const char *v = getenv(name);
	return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
		     !strcasecmp(v, "on"));
}

static bool is_rxm_verbs(const char *prov)
{
	return strstr(prov, "verbs") && strstr(prov, "ofi_rxm");
}

/* With SRX, verbs (1.17's vrb_poll_cq) reports every completion of the
 * shared receive queue as a RECV, so a write with immediate reaches rxm as
 * a 0-byte message and its immediate is lost (design.md §16.4): on such a
 * NIC writes go without immediates and the core sends each as a notice
 * once the write completed (core/notice.c). Said once per process.
 * XFER_OFI_IMM_BY_MSG=1 asks it of any provider, so that the host's tests
 * cover that path on tcp too. */
static bool imm_by_msg(const char *prov)
{
	static atomic_bool told;
	const char *force = getenv("XFER_OFI_IMM_BY_MSG");
	if (!(force && !strcmp(force, "1")) && !(is_rxm_verbs(prov) && env_on("FI_OFI_RXM_USE_SRX")))
		return false;
	if (!atomic_exchange(&told, true))
		xinfo("%s with a shared receive context (FI_OFI_RXM_USE_SRX=1): immediates follow their "
		      "writes as messages, not as write-with-immediate",
		      prov);
	return true;
}

/* Without SRX (the user turned it off) the crash above stays possible on
 * libfabric 1.17 and older: the user who chose that hears it once; the raw
 * backend ("ibverbs", what "auto" takes on an RDMA port) owns its queue
 * pairs and does not crash. */
static void warn_rxm_teardown(const char *prov)
{
	static atomic_bool told;
	if (!is_rxm_verbs(prov) || env_on("FI_OFI_RXM_USE_SRX") || fi_version() > FI_VERSION(1, 17) ||
	    atomic_exchange(&told, true))
		return;
	xwarn("%s on libfabric %u.%u without FI_OFI_RXM_USE_SRX: ofi_rxm can crash (SIGSEGV) when a peer "
	      "disconnects while one of its messages is unread; provider \"ibverbs\", or SRX, is "
	      "without that fault (docs/design.md §16.4)",
	      prov, FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
}

static int ofi_open_once(struct xfer_nic *nic, const char *provider, const char *domain);

static int ofi_open(struct xfer_nic *nic, const char *provider, const char *domain)
{
	static pthread_mutex_t first_lock = PTHREAD_MUTEX_INITIALIZER;
	static bool first_done;
	pthread_mutex_lock(&first_lock);
	if (!first_done) {
		no_mr_cache();
		if (may_open_verbs(provider)) {
			fit_rxm_cq();
			av_remove_cleanup();
			rxm_srx();
		}
	}
	first_done = true;
	pthread_mutex_unlock(&first_lock);
	int ret = ofi_open_once(nic, provider, domain);
	if (ret == -EBUSY) {
		/* shm itself unlinks the stale file it tripped over, but fails this
		 * attempt: clear any others and try once more. */
		remove_stale_shm_files();
		ret = ofi_open_once(nic, provider, domain);
	}
	return ret;
}

static int ofi_open_once(struct xfer_nic *nic, const char *provider, const char *domain)
{
	struct fi_info *list = NULL, *fi = pick(provider, domain, nic->want_hmem, &list);
	if (!fi)
		return domain ? -ENODEV : -XFER_ENOPROV;
	struct ofi_nic *o = calloc(1, sizeof(*o));
	if (!o) {
		fi_freeinfo(list);
		return -ENOMEM;
	}
	nic->priv = o;
	o->info = fi_dupinfo(fi);
	fi_freeinfo(list);
	if (!o->info)
		goto nomem;
	fi = o->info;
	o->mr_mode = fi->domain_attr->mr_mode;
	o->source = (fi->caps & FI_SOURCE) != 0;
	o->track = xi_ofi_conn_tracking(fi);
	if (!o->track && strstr(fi->fabric_attr->prov_name, "verbs"))
		xinfo("%s: a connection whose queue pair failed is not reset (FI_AV_REMOVE_CLEANUP off, "
		      "or the provider asks for FI_CONTEXT2)", fi->fabric_attr->prov_name);

	int ret = fi_fabric(fi->fabric_attr, &o->fabric, NULL);
	if (!ret)
		ret = fi_domain(o->fabric, fi, &o->domain, NULL);
	if (!ret)
		ret = open_cq(o, fi->tx_attr->size + fi->rx_attr->size + 64, nic->no_wait);
	if (!ret) {
		struct fi_av_attr av = {.type = FI_AV_TABLE};
		ret = fi_av_open(o->domain, &av, &o->av, NULL);
	}
	if (!ret)
		ret = fi_endpoint(o->domain, fi, &o->ep, NULL);
	if (!ret)
		ret = fi_ep_bind(o->ep, &o->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_ep_bind(o->ep, &o->av->fid, 0);
	if (!ret)
		ret = fi_enable(o->ep);
	if (!ret) {
		nic->addrlen = sizeof(nic->addr);
		ret = fi_getname(&o->ep->fid, nic->addr, &nic->addrlen);
	}
	if (ret) {
		xerr("opening %s on %s failed: %s", fi->fabric_attr->prov_name,
		     fi->domain_attr->name, fi_strerror(-ret));
		if (ret == -FI_EINVAL && strstr(fi->fabric_attr->prov_name, "verbs"))
			xerr("(rxm's CQ may exceed the device's limit: set FI_UNIVERSE_SIZE lower, e.g. 64, "
			     "before libfabric initializes)");
		ofi_close(nic);
		return xi_ofi_errno(ret);
	}
	warn_rxm_teardown(fi->fabric_attr->prov_name);
	snprintf(nic->provider, sizeof(nic->provider), "%s",
		 explicit_ofi(provider) ? provider : fi->fabric_attr->prov_name);
	snprintf(nic->domain, sizeof(nic->domain), "%s", fi->domain_attr->name);
	nic->tx_size = (uint32_t)(fi->tx_attr->size > 65536 ? 65536 : fi->tx_attr->size);
	/* XFER_OFI_TX_DEPTH=N (8 or more): at most N requests in the provider
	 * at once, the rest waiting in the engine's own queue. An experiment
	 * for issue 15: on some tcp;ofi_rxm process pairs a window of 64 KiB
	 * writes went into the provider at once and queued there, and those
	 * pairs ran 0.71-0.92x the raw loop (docs/performance.md, session 9). */
	size_t depth = env_size("XFER_OFI_TX_DEPTH", 0);
	if (depth >= 8 && depth < nic->tx_size)
		nic->tx_size = (uint32_t)depth;
	nic->rx_size = (uint32_t)(fi->rx_attr->size > 65536 ? 65536 : fi->rx_attr->size);
	nic->max_msg = fi->ep_attr->max_msg_size;
	nic->key_bits = (o->mr_mode & FI_MR_PROV_KEY) ? 0 : (uint32_t)(fi->domain_attr->mr_key_size * 8);
	atomic_store(&nic->gpu_native, (fi->caps & FI_HMEM) != 0);
	nic->dmabuf = OFI_HAVE_DMABUF && (fi->caps & FI_HMEM);
	nic->delivery_complete = (fi->tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0;
	nic->imm_by_msg = imm_by_msg(fi->fabric_attr->prov_name);
	xinfo("NIC %u: %s on %s, mr_mode 0x%llx, tx %u rx %u, wait fd %d, GPU memory %s, senders %s",
	      nic->index, nic->provider, nic->domain, (unsigned long long)o->mr_mode, nic->tx_size,
	      nic->rx_size, o->wait_fd, (fi->caps & FI_HMEM) ? "native (FI_HMEM)" : "staged",
	      o->source ? "checked (FI_SOURCE)" : "as claimed");
	return 0;
nomem:
	ofi_close(nic);
	return -ENOMEM;
}

const struct backend_ops xi_ofi_backend = {
	.name = "ofi",
	.open = ofi_open,
	.shutdown = ofi_shutdown,
	.close = ofi_close,
	.mr_reg = xi_ofi_mr_reg,
	.mr_dereg = xi_ofi_mr_dereg,
	.av_insert = xi_ofi_av_insert,
	.av_remove = xi_ofi_av_remove,
	.post_send = xi_ofi_post_send,
	.post_recv = xi_ofi_post_recv,
	.post_write = xi_ofi_post_write,
	.poll = xi_ofi_poll,
	.wait_fd = xi_ofi_wait_fd,
	.trywait = xi_ofi_trywait,
	.src_is = xi_ofi_src_is,
};
