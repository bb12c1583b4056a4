#!/usr/bin/env bash
# P/D KV-transfer benchmark on two GPUs (docs/kv.md, "GPU benchmark"): a
# transformer prefill on cuda:0 hands each layer's KV pages to a decoder on
# cuda:1, over the same-host CUDA IPC path and over tcp staged through host
# memory. Runs from the repository root on the GPU machine, with a build/
# made elsewhere carried over (as tests/gpu/run_on_device.sh does); libraries
# that machine lacks can be put in .devlibs/.
#
#   scripts/pd-gpu-bench.sh [--timeout SECONDS] [pd_gpu_bench.py options]
#   e.g. scripts/pd-gpu-bench.sh --json pd-gpu.json
# Exit status: the benchmark's (77: skipped, no torch or fewer than 2 GPUs),
# 124 when it ran past the timeout (default 280 s).
set -uo pipefail
limit=280
if [[ ${1:-} == --timeout ]]; then
	limit=$2
	shift 2
fi
if [[ ! -e build/libxfer.so ]]; then
	echo "pd-gpu-bench.sh: build/libxfer.so not found; run from the repository root with build/ made (make)" >&2
	exit 1
fi
chmod +x build/bin/* 2>/dev/null # a carried copy may lose its modes
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
missing=$(ldd build/libxfer.so | grep 'not found')
if [[ -n $missing && -d .devlibs ]]; then
	echo "using carried libraries for: $missing"
	export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$PWD/.devlibs
fi
# NVLink multicast stays off on the shared GPU machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} XFER_LIBRARY=$PWD/build/libxfer.so
export PYTHONUNBUFFERED=1
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
	nvidia-smi topo -m 2>/dev/null | head -3
fi
echo "+ timeout $limit python3 python/bench/pd_gpu_bench.py $*"
timeout -k 10 "$limit" python3 python/bench/pd_gpu_bench.py "$@"
rc=$?
[[ $rc -eq 124 ]] && echo "pd-gpu-bench.sh: stopped after $limit s (--timeout)" >&2
exit $rc
