/* What decoders and prefillers share: the engine they create, the control
 * thread that handles everything the engine's worker tells them (through the
 * inbox, kv_inbox.h), and the owner's lock.
 *
 * Threads: engine callbacks run on the worker and only copy into the inbox
 * (no allocation, no lock). The control thread and the application's calls
 * take `mu`; they may call blocking engine functions (registration, peers,
 * disarm), which never wait for `mu`, so nothing can deadlock. */
#ifndef XFER_KV_CORE_H
#define XFER_KV_CORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv_state.h"

uint64_t xi_kv_now_ns(void);

/* Creates the inbox, the engine (with the module's hooks) and the control
 * thread. The inbox holds as many completions as the engine itself can hold
 * submissions (submit_depth + max_ops), and one NIC's worth of messages. */
int xi_kv_core_start(struct kv_core *c, const struct xfer_attr *attr);
/* Stops the engine, then the thread; drops what is left in the inbox. */
void xi_kv_core_stop(struct kv_core *c);
/* Wakes the control thread (work that needs retrying, a new deadline). */
void xi_kv_core_kick(struct kv_core *c);
/* Waits (mu held, released while waiting) until an inbox credit is free:
 * for an application call whose submission must not be refused. 0, or
 * -ESHUTDOWN once the module stops. */
int xi_kv_core_wait_credit(struct kv_core *c);
/* Waits (mu held) until *count is not 0 or timeout_ms passes: the
 * application's poll for the owner's events. */
void xi_kv_core_wait_events(struct kv_core *c, const uint32_t *count, uint64_t timeout_ms);
/* Messages the inbox had no room for. */
uint64_t xi_kv_core_dropped(struct kv_core *c);

#endif
