#!/usr/bin/env bash
# xfer.moe on a GPU machine, from a carried build/ (builds nothing): the GPU
# correctness checks (2 and 4 ranks as processes on the GPU(s) here, through
# the same-host CUDA IPC path, the engine path staged over tcp, and both at
# once; fp8; split halves; both wait modes; a CUDA graph), then the
# benchmark (decode and prefill, >= 1,000 rounds; the engine path for the
# proxy's share). Each step is separate, has its own timeout and log, and
# the script goes on after a failure. About 4 minutes on one H200.
#
#   scripts/device-moe.sh OUT_DIR
set -uo pipefail
out=${1:?usage: scripts/device-moe.sh OUT_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$PWD/python XFER_LIBRARY=$PWD/build/libxfer.so XFER_MOE_CUDA_LIBRARY=$PWD/build/libxfer_moe_cuda.so
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
py=${PYTHON:-python3}
fails=0
step() { # name, timeout (s), command...
	local name=$1 limit=$2
	shift 2
	local t0=$SECONDS
	timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
	local rc=$?
	echo "$name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
	[ $rc -ne 0 ] && { fails=$((fails + 1)); tail -n 30 "$out/$name.log" | sed "s/^/    $name| /"; }
	return 0
}
t=python/tests/moe_ranks.py
b=python/bench/moe_bench.py
: >"$out/summary.txt"
step env 30 bash -c "nvidia-smi; nvidia-smi -q | grep -i -E 'compute mode|mig mode' ; $py -c 'import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'; ls -la build/libxfer.so* build/libxfer_moe_cuda.so; $py -c 'from xfer import _moe_lib as m; print(\"libxfer_moe_cuda version\", m.g.cuda_version(), m.CUDA_LIBRARY_PATH)'"
# correctness: every expert row and combined token against the torch reference
step gpu-2-ipc 60 $py $t --world 2 --device cuda --mode ipc --rounds 12
step gpu-2-ipc-fp8-split 60 $py $t --world 2 --device cuda --mode ipc --rounds 8 --fp8 --split
step gpu-2-ipc-kernelwait 60 $py $t --world 2 --device cuda --mode ipc --rounds 6 --gpu-wait kernel
step gpu-2-engine 90 $py $t --world 2 --device cuda --mode engine --rounds 8
step gpu-4-ipc 90 $py $t --world 4 --device cuda --mode ipc --rounds 8 --fp8
step gpu-4-engine 120 $py $t --world 4 --device cuda --mode engine --rounds 6 --layout packed
step gpu-4-mixed 120 $py $t --world 4 --device cuda --mode mixed --rounds 8 --fp8
step gpu-2-graph-ipc 60 $py $t --world 2 --device cuda --mode ipc --check graph
step gpu-2-graph-engine 90 $py $t --world 2 --device cuda --mode engine --check graph
# benchmark: one H200, 2 ranks, the same-host path, then the engine path
step bench-decode-ipc 120 $py $b --shape decode --world 2 --mode ipc --iters 1000 --json "$out/bench-decode-ipc.json"
step bench-prefill-ipc 150 $py $b --shape prefill --world 2 --mode ipc --iters 1000 --per-graph 20 --json "$out/bench-prefill-ipc.json"
step bench-decode-ipc-kernelwait 90 $py $b --shape decode --world 2 --mode ipc --gpu-wait kernel --iters 200 --per-graph 20
step bench-decode-engine 150 $py $b --shape decode --world 2 --mode engine --iters 300 --per-graph 20 --json "$out/bench-decode-engine.json"
echo "device-moe: $fails step(s) failed" | tee -a "$out/summary.txt"
exit $((fails > 0))
