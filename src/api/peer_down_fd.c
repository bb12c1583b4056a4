/* A ready-made on_peer_down handler that only writes to a file descriptor,
 * for callers that must not run code on the worker thread: a Python
 * binding's callback would make the worker wait for the interpreter lock. */
#include <stdint.h>
#include <unistd.h>

#include "xfer.h"

void xfer_peer_down_notify_fd(void *ctx, uint32_t peer, uint64_t engine_id, int reason)
{
	(void)peer;
	(void)engine_id;
	(void)reason;
	uint64_t one = 1;
	/* The descriptor never blocks (eventfd, or a pipe opened O_NONBLOCK);
	 * when a pipe is full, its reader has a wakeup pending already. */
	ssize_t r = write((int)(intptr_t)ctx, &one, sizeof(one));
	(void)r;
}
