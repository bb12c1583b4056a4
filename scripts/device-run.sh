#!/usr/bin/env bash
# Everything that needs a GPU, in one go (the GPU machine is lent by the
# minute): the C GPU tests, xfer-gpu-bench with its NCCL baseline, the Python
# tests that use torch CUDA tensors, and the P/D GPU benchmark. Runs from the
# repository root with a build/ made elsewhere carried over; logs go to $1.
#
#   scripts/device-run.sh OUT_DIR [quick]     (quick: tests only, no benchmarks)
set -uo pipefail
out=${1:?usage: scripts/device-run.sh OUT_DIR [quick]}
mode=${2:-full}
. "$(dirname "$0")/device-lib.sh" # the environment, step NAME TIMEOUT COMMAND..., OUT/summary.txt
if [ "$mode" = quick ]; then
	step gpu-tests 300 env XFER_GPU_SKIP_BENCH=1 bash tests/gpu/run_on_device.sh "$out"
else
	step gpu-tests 600 bash tests/gpu/run_on_device.sh "$out"
fi
step python-gpu 240 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_pair_cuda.py \
	python/tests/test_kv.py python/tests/test_watcher.py python/tests/test_signal.py python/tests/test_misc.py \
	-k "cuda or torch or gpu or graph"
if [ "$mode" != quick ]; then
	step pd-gpu-bench 230 scripts/pd-gpu-bench.sh --timeout 200 --json "$out/pd-gpu.json"
	step pd-gpu-bench-block 90 scripts/pd-gpu-bench.sh --timeout 60 --seqs 32768,131072 --gpu-wait block
	step pd-gpu-bench-copy 90 scripts/pd-gpu-bench.sh --timeout 60 --seqs 32768,131072 --gpu-wait copy
fi
echo "device-run: $fails step(s) failed"
exit $((fails > 0))
