#!/usr/bin/env bash
# GPU checks of branch gpu (issue 14): the paged GPU->GPU write as one
# gather/scatter kernel per call on the same-host CUDA IPC path. Builds
# nothing: run from the repository root with build/ of this branch carried
# over (made where nvcc exists, so libxfer embeds the kernels' fatbin).
#
#   scripts/device-gpu.sh OUT_DIR
#
# Steps, most important first, each with its own timeout and log (about 2-3
# minutes on 1x H200; the timeouts add up to 5.7):
#   bench          xfer-gpu-bench: paged 4/16/64 KiB x 1,024 and x 16,384
#                  (random permutations, bytes verified) and single writes
#                  64 KiB..1 GiB, 1 and 16 in flight, vs a contiguous
#                  cross-process device copy in the same run
#   bench-engine   the paged rows again with XFER_GPU_KERNEL=0 (copy engine:
#                  the "before")
#   watcher-latency  events 2 ms / 100 us apart, 2,000 each in one CUDA Graph:
#                  default watcher (now spin mode), then hybrid spin_us 50
#                  (about 10 s)
#   test-ipc       test_gpu ipc and scatter-ipc on shm and tcp (bytes verified,
#                  odd-sized pages included: the kernel's unaligned path)
#   test-staged    test_gpu staged on shm (the staged path, unchanged)
#   bench-mapped   the paged rows with XFER_GPU_INDEX=mapped (the kernel reads
#                  page lists from pinned host memory)
#   watcher        test_gpu watcher (CUDA Graph, hybrid spin_us 100000)
set -uo pipefail
out=${1:?usage: scripts/device-gpu.sh OUT_DIR}
mkdir -p "$out"
chmod +x build/bin/* 2>/dev/null
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d .devlibs ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$PWD/.devlibs
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XFER_LOG_LEVEL=info # the library says whether the kernels loaded
fails=0
step() { # name, timeout, command...
	local name=$1 t=$2
	shift 2
	local t0=$SECONDS
	{ echo "\$ $*"; timeout "$t" "$@"; } >"$out/$name.log" 2>&1
	local rc=$?
	echo "$name: rc=$rc in $((SECONDS - t0)) s$([ $rc -eq 77 ] && echo ' (skipped: no GPU)')" | tee -a "$out/steps.log"
	[ $rc -ne 0 ] && [ $rc -ne 77 ] && fails=$((fails + 1))
	return 0
}
{
	nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader
	ls -l build/gen/pages.fatbin 2>&1
} >"$out/env.log" 2>&1
step bench 75 build/bin/xfer-gpu-bench
step bench-engine 45 env XFER_GPU_KERNEL=0 XFER_BENCH_ONLY=paged build/bin/xfer-gpu-bench
step watcher-latency 40 build/bin/test_gpu watcher-latency
for p in shm tcp; do
	step test-ipc-$p 25 env XFER_TEST_PROVIDER=$p build/bin/test_gpu ipc
	step test-scatter-ipc-$p 25 env XFER_TEST_PROVIDER=$p build/bin/test_gpu scatter-ipc
done
step test-staged-shm 25 env XFER_TEST_PROVIDER=shm build/bin/test_gpu staged
step bench-mapped 35 env XFER_GPU_INDEX=mapped XFER_BENCH_ONLY=paged build/bin/xfer-gpu-bench
step watcher 20 build/bin/test_gpu watcher
echo "device-gpu: $fails step(s) failed" | tee -a "$out/steps.log"
exit $((fails > 0))
