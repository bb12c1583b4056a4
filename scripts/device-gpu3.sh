#!/usr/bin/env bash
# GPU checks of branch gpu3 (issue 14, per-call cost): calls posted in one
# worker turn share one kernel launch and one event; contiguous GPU->GPU
# writes up to XFER_GPU_KERNEL_MAX (default 16 MiB) go by that kernel when
# they share a launch (a lone one goes to the copy engine); staged paged
# writes gather into / land from the host mirrors by that kernel;
# XFER_GPU_TRACE times each stage. Builds nothing: run from the repository
# root with build/ of this branch carried over (made where nvcc exists).
#
#   scripts/device-gpu3.sh [OUT_DIR]   (default: $OUT)
#
# Steps, most important first, each with its own timeout and log (all logs
# also in OUT_DIR/gpu3-logs.tgz). Run 2 (20:44 UTC) took 32 s for 19 steps;
# this list should take ~40 s; timeouts add up to 148 s.
#   bench-r1..3    xfer-gpu-bench, final defaults, three times: paged 4/16/64
#                  KiB x 1,024 and x 16,384 + single writes 64 KiB..1 GiB at
#                  1/16 in flight, vs a cross-process device copy, verified
#   bench-old      XFER_GPU_BATCH=0 XFER_GPU_KERNEL_MAX=0 (main's behaviour)
#   staged-*       XFER_BENCH_ONLY=staged: GPU memory through host mirrors vs
#                  host memory on the same provider (tcp, shm; twice each);
#                  -nokernel: XFER_GPU_KERNEL=0 (per-page copies, the before)
#   bench-spread   XFER_GPU_SPREAD=1 paged rows (run 2: slower; kept off)
#   trace-*        one row alone with XFER_GPU_TRACE (stage summary in the log)
#   test-signal-*  test_gpu_signal: one kernel launched before any byte
#                  arrives waits on completion signal words, layer by layer
#   test-*         test_gpu ipc / scatter-ipc / staged / scatter-staged (bytes
#                  verified; staged: gathers and landings by kernel, polled)
set -uo pipefail
out=${1:-${OUT:?usage: scripts/device-gpu3.sh OUT_DIR (or \$OUT set)}}
. "$(dirname "$0")/device-gpu-lib.sh"
git rev-parse HEAD >>"$out/env.log" 2>&1
B=build/bin/xfer-gpu-bench
OLD="XFER_GPU_BATCH=0 XFER_GPU_KERNEL_MAX=0" # main's behaviour: one launch per call, singles by copy engine
# Repeats: one run's ratios move by up to ~0.2 between runs of one setting.
for r in 1 2 3; do step bench-r$r 8 $B; done
step bench-old 8 env $OLD $B
for r in 1 2; do
	step staged-tcp-r$r 12 env XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=tcp $B
	step staged-shm-r$r 12 env XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=shm $B
done
step staged-shm-nokernel 12 env XFER_GPU_KERNEL=0 XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=shm $B
step bench-spread 8 env XFER_GPU_SPREAD=1 XFER_BENCH_ONLY=paged $B
# Traced single rows (stage summaries in the logs, records in *.csv.<pid>).
step trace-p4k 4 env XFER_BENCH_ROW=0 XFER_GPU_TRACE="$out/trace-p4k.csv" $B
step trace-p16k16k 4 env XFER_BENCH_ROW=3 XFER_GPU_TRACE="$out/trace-p16k16k.csv" $B
step trace-s64k 4 env XFER_BENCH_ROW=6 XFER_GPU_TRACE="$out/trace-s64k.csv" $B
step test-signal-ipc-shm 8 env XFER_TEST_PROVIDER=shm build/bin/test_gpu_signal ipc
step test-signal-staged-tcp 8 env XFER_TEST_PROVIDER=tcp build/bin/test_gpu_signal staged
step test-ipc-shm 4 env XFER_TEST_PROVIDER=shm build/bin/test_gpu ipc
step test-scatter-ipc-shm 4 env XFER_TEST_PROVIDER=shm build/bin/test_gpu scatter-ipc
step test-staged-shm 4 env XFER_TEST_PROVIDER=shm build/bin/test_gpu staged
step test-staged-tcp 4 env XFER_TEST_PROVIDER=tcp build/bin/test_gpu staged
step test-scatter-staged-tcp 4 env XFER_TEST_PROVIDER=tcp build/bin/test_gpu scatter-staged
echo "device-gpu3: $fails step(s) failed" | tee -a "$out/steps.log"
tar -czf "$out/gpu3-logs.tgz" -C "$out" $(cd "$out" && ls *.log *.csv.* 2>/dev/null) 2>/dev/null
exit $((fails > 0))
