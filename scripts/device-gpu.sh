#!/usr/bin/env bash
# GPU checks of branch gpu (issue 14): the paged GPU->GPU write as one
# gather/scatter kernel per call on the same-host CUDA IPC path. Builds
# nothing: run from the repository root with build/ of this branch carried
# over (made where nvcc exists, so libxfer embeds the kernels' fatbin).
#
#   scripts/device-gpu.sh OUT_DIR
#
# Steps, most important first, each with its own timeout and log; all logs
# end up in OUT_DIR/gpu-logs.tgz too (the device tool returns few files).
# About 40 s on 1x H200 (run of 2026-12-01: bench ~20 s, watcher-latency
# 9 s, tests 1 s each); timeouts add up to 90 s. DEVICE_GPU_FULL=1 adds the
# copy-engine and index-mode variants of the paged rows (~40 s more).
#   bench          xfer-gpu-bench: paged 4/16/64 KiB x 1,024 and x 16,384
#                  (random permutations, bytes verified) and single writes
#                  64 KiB..1 GiB, 1 and 16 in flight, vs a contiguous
#                  cross-process device copy in the same run
#   watcher-latency  events 2 ms / 100 us apart, 2,000 each in one CUDA Graph:
#                  default watcher (spin mode), then hybrid spin_us 50
#   test-ipc-shm   test_gpu ipc (bytes verified, odd-sized pages included:
#                  the kernel's unaligned path), test-staged-shm test_gpu staged
#   full only: bench-engine (XFER_GPU_KERNEL=0), bench-device and
#                  bench-mapped (XFER_GPU_INDEX), scatter-ipc, tcp, watcher
set -uo pipefail
out=${1:?usage: scripts/device-gpu.sh OUT_DIR}
. "$(dirname "$0")/device-gpu-lib.sh"
step bench 40 build/bin/xfer-gpu-bench
step watcher-latency 20 build/bin/test_gpu watcher-latency
step test-ipc-shm 15 env XFER_TEST_PROVIDER=shm build/bin/test_gpu ipc
step test-staged-shm 15 env XFER_TEST_PROVIDER=shm build/bin/test_gpu staged
if [ -n "${DEVICE_GPU_FULL:-}" ]; then
	step bench-engine 30 env XFER_GPU_KERNEL=0 XFER_BENCH_ONLY=paged build/bin/xfer-gpu-bench
	step bench-device 20 env XFER_GPU_INDEX=device XFER_BENCH_ONLY=paged build/bin/xfer-gpu-bench
	step bench-mapped 20 env XFER_GPU_INDEX=mapped XFER_BENCH_ONLY=paged build/bin/xfer-gpu-bench
	step test-scatter-ipc-shm 15 env XFER_TEST_PROVIDER=shm build/bin/test_gpu scatter-ipc
	step test-ipc-tcp 15 env XFER_TEST_PROVIDER=tcp build/bin/test_gpu ipc
	step watcher 15 build/bin/test_gpu watcher
fi
echo "device-gpu: $fails step(s) failed" | tee -a "$out/steps.log"
tar -czf "$out/gpu-logs.tgz" -C "$out" $(cd "$out" && ls *.log) 2>/dev/null
exit $((fails > 0))
