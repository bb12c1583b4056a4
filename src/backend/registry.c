/* Which backend serves a provider name. Every backend other than the
 * default answers for the names it serves through a select function in its
 * own header (NULL: not mine; a backend may also decline a name it serves
 * when its device or library is missing); they are asked in order, and
 * libfabric, the default, serves every name none of them took ("auto",
 * "tcp", "efa", ...: libfabric knows its providers' names itself).
 *
 * Adding a backend is two lines here: its #include and its select function
 * in backends[]. */
#include "backend/registry.h"

#include <stddef.h>

#include "backend/ibv/ibv_backend.h"
#include "backend/ofi/ofi.h"
#include "backend/sm/sm_backend.h"

typedef const struct backend_ops *(*backend_select_fn)(const char *provider);

static const backend_select_fn backends[] = {
	xi_sm_select,  /* "shm": xfer's own same-host backend */
	xi_ibv_select, /* "ibverbs", and "auto" where an RDMA port is active */
	NULL, /* the end of the list; backends go above */
};

static const struct backend_ops *override;

void xi_backend_override(const struct backend_ops *ops)
{
	override = ops;
}

const struct backend_ops *xi_backend_find(const char *provider)
{
	if (override)
		return override;
	for (size_t i = 0; provider && backends[i]; i++) {
		const struct backend_ops *b = backends[i](provider);
		if (b)
			return b;
	}
	return &xi_ofi_backend;
}
