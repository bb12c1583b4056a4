/* Which backend serves a provider name. Each backend's table is named in
 * its own header; the first entry is the default and serves every name the
 * others do not claim (libfabric knows its providers' names itself).
 * Adding a backend is two lines here: its #include and its entry. */
#include "backend/registry.h"

#include <stddef.h>
#include <string.h>

#include "backend/ofi/ofi.h"

static const struct backend_ops *const backends[] = {
	&xi_ofi_backend,
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
	for (size_t i = 1; provider && i < sizeof(backends) / sizeof(backends[0]); i++)
		if (!strcmp(backends[i]->name, provider))
			return backends[i];
	return backends[0];
}
