/* Which backend serves a provider name (registry.c lists them all). */
#ifndef XFER_BACKEND_REGISTRY_H
#define XFER_BACKEND_REGISTRY_H

#include "backend/backend.h"

/* The backend serving provider (never NULL: libfabric serves every name no
 * other backend claims). */
const struct backend_ops *xi_backend_find(const char *provider);
/* Tests only: engines created from now on use ops, whatever the provider. */
void xi_backend_override(const struct backend_ops *ops);

#endif
