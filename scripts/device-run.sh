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
mkdir -p "$out"
chmod +x build/bin/* 2>/dev/null
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d .devlibs ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$PWD/.devlibs
export PYTHONPATH=$PWD/python XFER_LIBRARY=$PWD/build/libxfer.so
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
fails=0
step() { # name, command...
	local name=$1
	shift
	local t0=$SECONDS
	"$@" >"$out/$name.log" 2>&1
	local rc=$?
	echo "$name: rc=$rc in $((SECONDS - t0)) s"
	[ $rc -ne 0 ] && fails=$((fails + 1))
	return 0
}
if [ "$mode" = quick ]; then
	step gpu-tests env XFER_GPU_SKIP_BENCH=1 bash tests/gpu/run_on_device.sh "$out"
else
	step gpu-tests bash tests/gpu/run_on_device.sh "$out"
fi
step python-gpu timeout 240 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_pair_cuda.py \
	python/tests/test_kv.py python/tests/test_watcher.py python/tests/test_signal.py python/tests/test_misc.py \
	-k "cuda or torch or gpu or graph"
if [ "$mode" != quick ]; then
	step pd-gpu-bench scripts/pd-gpu-bench.sh --timeout 200 --json "$out/pd-gpu.json"
	step pd-gpu-bench-block scripts/pd-gpu-bench.sh --timeout 60 --seqs 32768,131072 --gpu-wait block
	step pd-gpu-bench-copy scripts/pd-gpu-bench.sh --timeout 60 --seqs 32768,131072 --gpu-wait copy
fi
echo "device-run: $fails step(s) failed"
exit $((fails > 0))
