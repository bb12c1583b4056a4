/* The transport interface. A backend drives one NIC (a libfabric domain today;
 * a raw ibverbs device or a same-host path later). Every slot of the ops
 * table is filled: what a backend cannot do points at a stub returning
 * -EOPNOTSUPP, so the core never tests for NULL. All calls but discovery and
 * open happen on the NIC's worker thread only. Backends live in folders of
 * their own under src/backend/ and are found through registry.h; they see
 * nothing of the core (its state reaches them only as the contexts they
 * hand back in events). */
#ifndef XFER_BACKEND_H
#define XFER_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct xfer_nic;

/* Storage the backend may use per posted request (libfabric's fi_context2). */
#define NIC_CTX_BYTES 64

enum nic_event_type {
	NIC_EV_TX,           /* a send or write we posted finished */
	NIC_EV_RECV,         /* a posted receive was filled */
	NIC_EV_REMOTE_WRITE, /* a peer's write with immediate landed here */
};

struct nic_event {
	enum nic_event_type type;
	int status; /* 0 or -errno */
	void *ctx;  /* what was passed when posting; NULL for REMOTE_WRITE */
	size_t len; /* bytes received, for NIC_EV_RECV */
	uint32_t imm;
	/* NIC_EV_RECV: who sent it, where the backend can tell (has_src), as a
	 * token for src_is: the core checks the sender a message names against
	 * it. A backend that cannot tell leaves has_src false. */
	bool has_src;
	uint64_t src;
};

/* The token of a sender that is in none of this NIC's address entries. */
#define NIC_SRC_UNKNOWN UINT64_MAX

struct nic_mr {
	void *handle;
	void *desc;    /* local descriptor to pass when posting from this region */
	uint64_t key;  /* remote key */
	uint64_t base; /* what the peer adds offsets to */
};

/* What a registration covers, for backends that can register device memory
 * in place (gpu_native): NULL or cuda_dev -1 is host memory. */
struct nic_mem {
	int cuda_dev;           /* CUDA device ordinal of the memory */
	int dmabuf_fd;          /* -1, or a dma-buf exporting the memory (the caller closes it) */
	uint64_t dmabuf_offset; /* of the region's first byte within the dma-buf */
	void *dmabuf_base;      /* virtual address of the dma-buf's first byte */
};

/* What a registration allows (mr_reg's access). Internal bounce buffers are
 * LOCAL, so that no peer can write into them; regions peers write into (the
 * application's and the zero-length-write sink) are REMOTE_WRITE. */
#define NIC_MR_LOCAL 0x0u        /* sends, receives, and the source of our writes */
#define NIC_MR_REMOTE_WRITE 0x1u /* also the target of peers' writes */

struct nic_write {
	uint64_t dest;
	const void *buf;
	size_t len;
	void *desc;
	uint64_t raddr;
	uint64_t rkey;
	int has_imm;
	uint32_t imm;
};

struct backend_ops {
	const char *name;
	/* Opens the NIC named domain of provider (domain NULL: the first that
	 * matches) and fills nic's description; -ENODEV when there is none. */
	int (*open)(struct xfer_nic *nic, const char *provider, const char *domain);
	/* Stops the NIC's traffic: closes its endpoint (queue pairs) and reads
	 * what it still reports, so that nothing completes or lands in memory
	 * afterwards. Teardown calls it on every NIC before releasing the
	 * registrations, then close frees the rest: the order libfabric and
	 * verbs document (endpoint, memory regions, CQ/AV/domain). */
	void (*shutdown)(struct xfer_nic *nic);
	void (*close)(struct xfer_nic *nic);
	/* key: the remote key to use where the application chooses them
	 * (key_bits > 0); access: NIC_MR_*; mem: NULL for host memory. */
	int (*mr_reg)(struct xfer_nic *nic, void *buf, size_t len, uint64_t key, unsigned access,
		      const struct nic_mem *mem, struct nic_mr *out);
	void (*mr_dereg)(struct xfer_nic *nic, struct nic_mr *mr);
	int (*av_insert)(struct xfer_nic *nic, const void *addr, size_t len, uint64_t *dest);
	int (*av_remove)(struct xfer_nic *nic, uint64_t dest);
	int (*post_send)(struct xfer_nic *nic, uint64_t dest, const void *buf, size_t len, void *desc,
			 void *ctx);
	int (*post_recv)(struct xfer_nic *nic, void *buf, size_t len, void *desc, void *ctx);
	int (*post_write)(struct xfer_nic *nic, const struct nic_write *w, void *ctx);
	int (*poll)(struct xfer_nic *nic, struct nic_event *ev, int max);
	/* A file descriptor that becomes readable when the NIC has work, or -1. */
	int (*wait_fd)(struct xfer_nic *nic);
	/* 0 when it is safe to sleep on wait_fd, -EAGAIN when events are pending. */
	int (*trywait)(struct xfer_nic *nic);
	/* 1 when the sender token src (from a NIC_EV_RECV) is the remote end of
	 * dest (from av_insert), 0 when it is not; -EOPNOTSUPP where the backend
	 * cannot tell (it then never sets has_src). */
	int (*src_is)(struct xfer_nic *nic, uint64_t src, uint64_t dest);
};

struct xfer_nic {
	void *priv; /* the backend's own state */
	unsigned index;
	char provider[32];
	char domain[64];
	uint8_t addr[256];
	size_t addrlen;
	uint32_t tx_size;   /* requests the NIC accepts at once */
	uint32_t rx_size;
	uint64_t max_msg;   /* largest single transfer */
	uint32_t key_bits;  /* width of application-chosen keys; 0 if the provider picks */
	/* Set before open: 0 never ask for FI_HMEM, 1 where it can help, 2 from
	 * every provider (XFER_GPU_NATIVE=1, for tests). */
	uint8_t want_hmem;
	/* Set before open: the worker never sleeps (busy-poll mode, or spin_us
	 * XFER_SPIN_FOREVER), so the NIC needs no wait object; libfabric opens
	 * its CQ without one (FI_WAIT_NONE, as the raw loop of xfer-bench does;
	 * tcp;ofi_rxm 1.17 then progresses with poll() instead of epoll_wait()
	 * on a wait set, by strace on the 2-vCPU machine). */
	bool no_wait;
	/* The provider registers device memory in place (FI_HMEM), so GPU regions
	 * need no host mirror. Cleared when such a registration fails for good. */
	atomic_bool gpu_native;
	bool dmabuf;        /* mr_reg can take a dma-buf (libfabric >= 1.20) */
	bool delivery_complete; /* a completion means the data is at the target */
	/* Writes cannot carry an immediate (ofi_rxm's shared receive context on
	 * verbs, ofi_open.c): the core sends it as a notice once the write
	 * completed (core/notice.c), and an immediate alone as that notice only. */
	bool imm_by_msg;
};

/* Fills every NULL slot of ops with a stub that fails with -EOPNOTSUPP (or,
 * for poll, finds nothing). */
void xi_backend_fill_stubs(struct backend_ops *ops);

#endif
