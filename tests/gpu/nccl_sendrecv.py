"""NCCL send/recv GPU0 -> GPU1 through PyTorch, the same sizes as
xfer-gpu-bench, to print beside it (run both in one device session)."""
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30]


def iters_for(n):
    return 10 if n >= 256 << 20 else 50 if n >= 16 << 20 else 200


def run(rank, world):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    buf = torch.empty(1 << 30, dtype=torch.uint8, device=f"cuda:{rank}")
    for n in SIZES:
        t = buf[:n]
        it = iters_for(n)
        for warm in (True, False):
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(1 if warm else it):
                if rank == 0:
                    dist.send(t, 1)
                else:
                    dist.recv(t, 0)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        if rank == 1:
            print(f"nccl send/recv {n:>12} B: {n * it / dt / 1e9:8.2f} GB/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if torch.cuda.device_count() < 2:
        print("SKIP: NCCL send/recv needs two GPUs")
    else:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", NCCL_NVLS_ENABLE="0",
                          TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
        mp.spawn(run, args=(2,), nprocs=2)
