/* Regions, the API half (xfer_mr_*): what engine destroy needs of it. */
#ifndef XFER_API_MR_H
#define XFER_API_MR_H

#include "core/objects.h"

/* At destroy, after stop released every registration: the handles. */
void xi_mr_free_all(xfer_engine_t *e);

#endif
