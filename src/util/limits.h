/* Limits every layer shares. */
#ifndef XFER_UTIL_LIMITS_H
#define XFER_UTIL_LIMITS_H

/* NICs per engine (one worker's domain group); addresses carry as many. */
#define XFER_NIC_MAX 4

#endif
