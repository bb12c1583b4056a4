/* Regions on the NICs: registration on every NIC with a fresh key, release,
 * and the engine's table of user regions by id (notices name a region by
 * its id; the worker finds it in O(1)). The table changes only on the
 * worker (control calls), or after the worker exited under ctl_lock. */
#ifndef XFER_CORE_REGIONS_H
#define XFER_CORE_REGIONS_H

#include <stddef.h>
#include <stdint.h>

#include "core/objects.h"

/* A region of host memory not yet registered anywhere. */
xfer_mr_t *xi_mr_alloc(xfer_engine_t *e, void *buf, size_t len, unsigned access);
int xi_mr_register_on_nics(xfer_engine_t *e, xfer_mr_t *mr);
void xi_mr_release_on_nics(xfer_engine_t *e, xfer_mr_t *mr);

int xi_regions_init(xfer_engine_t *e);
void xi_regions_destroy(xfer_engine_t *e);
uint32_t xi_regions_count(const xfer_engine_t *e);
/* Registers a user region and enters it in the table: 0, or the NICs'
 * error (or -ENOMEM) with nothing left registered. */
int xi_regions_add(xfer_engine_t *e, xfer_mr_t *mr);
/* Takes it out of the table (its registrations are the caller's business). */
void xi_regions_del(xfer_engine_t *e, xfer_mr_t *mr);
xfer_mr_t *xi_regions_find(const xfer_engine_t *e, uint64_t id);
/* After the worker exited: every user region leaves the NICs (the structs
 * stay until xfer_mr_dereg or destroy). */
void xi_regions_release_all(xfer_engine_t *e);
/* Visits the table: *pos = 0 first; NULL when done. */
xfer_mr_t *xi_regions_next(const xfer_engine_t *e, uint32_t *pos);

#endif
