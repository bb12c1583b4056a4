#!/usr/bin/env bash
# GPU checks of branch gpu3 (issue 14, per-call cost): calls posted in one
# worker turn share one kernel launch and one event; contiguous GPU->GPU
# writes up to XFER_GPU_KERNEL_MAX (default 4 MiB) go by that kernel too;
# XFER_GPU_TRACE times each stage. Builds nothing: run from the repository
# root with build/ of this branch carried over (made where nvcc exists).
#
#   scripts/device-gpu3.sh [OUT_DIR]   (default: $OUT)
#
# Steps, most important first, each with its own timeout and log (all logs
# also in OUT_DIR/gpu3-logs.tgz). Expected ~75 s on 1x H200; timeouts add
# up to 148 s.
#   bench          xfer-gpu-bench, new defaults: paged 4/16/64 KiB x 1,024
#                  and x 16,384 + single writes 64 KiB..1 GiB at 1/16 in
#                  flight, vs a cross-process device copy, bytes verified
#   bench-old      the same with XFER_GPU_BATCH=0 XFER_GPU_KERNEL_MAX=0
#                  (one launch per call, single writes by copy engine: the
#                  behaviour of main) for an A/B in one session
#   trace-p4k      row 0 (paged 1,024 x 4 KiB) alone, XFER_GPU_TRACE on:
#                  stage summary in the log, records in trace-p4k.csv.<pid>
#   trace-s64k     row 6 (single 64 KiB, both depths) alone, traced
#   trace-s64k-old row 6 with XFER_GPU_BATCH=0 XFER_GPU_KERNEL_MAX=0, traced
#   single-kmax64m single rows with XFER_GPU_KERNEL_MAX=64M (kernel up to
#                  64 MiB) to place the kernel/copy-engine crossover
#   staged-tcp, staged-shm  XFER_BENCH_ONLY=staged: GPU memory through host
#                  mirrors vs host memory on the same provider (single 64 KiB
#                  ..16 MiB, paged 1,024 x 4/16/64 KiB, 16 in flight)
#   test-ipc-shm, test-staged-shm   test_gpu (bytes verified, odd-sized
#                  pages included; staged: the target's async landings)
set -uo pipefail
out=${1:-${OUT:?usage: scripts/device-gpu3.sh OUT_DIR (or \$OUT set)}}
mkdir -p "$out"
chmod +x build/bin/* 2>/dev/null
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d .devlibs ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$PWD/.devlibs
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XFER_LOG_LEVEL=info # the library says whether the kernels loaded; the trace summary is info
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
	git rev-parse HEAD 2>&1
} >"$out/env.log" 2>&1
step bench 30 build/bin/xfer-gpu-bench
step bench-old 30 env XFER_GPU_BATCH=0 XFER_GPU_KERNEL_MAX=0 build/bin/xfer-gpu-bench
step trace-p4k 10 env XFER_BENCH_ROW=0 XFER_GPU_TRACE="$out/trace-p4k.csv" build/bin/xfer-gpu-bench
step trace-s64k 10 env XFER_BENCH_ROW=6 XFER_GPU_TRACE="$out/trace-s64k.csv" build/bin/xfer-gpu-bench
step trace-s64k-old 10 env XFER_BENCH_ROW=6 XFER_GPU_BATCH=0 XFER_GPU_KERNEL_MAX=0 \
	XFER_GPU_TRACE="$out/trace-s64k-old.csv" build/bin/xfer-gpu-bench
step single-kmax64m 12 env XFER_BENCH_ONLY=single XFER_GPU_KERNEL_MAX=64M build/bin/xfer-gpu-bench
step staged-tcp 15 env XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=tcp build/bin/xfer-gpu-bench
step staged-shm 15 env XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=shm build/bin/xfer-gpu-bench
step test-ipc-shm 8 env XFER_TEST_PROVIDER=shm build/bin/test_gpu ipc
step test-staged-shm 8 env XFER_TEST_PROVIDER=shm build/bin/test_gpu staged
echo "device-gpu3: $fails step(s) failed" | tee -a "$out/steps.log"
tar -czf "$out/gpu3-logs.tgz" -C "$out" $(cd "$out" && ls *.log *.csv.* 2>/dev/null) 2>/dev/null
exit $((fails > 0))
