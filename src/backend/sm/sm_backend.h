/* xfer's own same-host backend (docs/design.md §8.1), as the backend registry
 * sees it: one select function. Everything else is private to src/backend/sm. */
#ifndef XFER_SM_BACKEND_H
#define XFER_SM_BACKEND_H

#include "backend/backend.h"

/* The ops table for provider "shm", else NULL. */
const struct backend_ops *xi_sm_select(const char *provider);

#endif
