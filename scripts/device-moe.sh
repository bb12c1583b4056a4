#!/usr/bin/env bash
# xfer.moe on a GPU machine, from a carried build/ (builds nothing): the GPU
# correctness checks (2 and 4 ranks as processes on the GPU(s) here, through
# the same-host CUDA IPC path, the engine path staged over tcp, and both at
# once; fp8; split halves; both wait modes; a CUDA graph), and the benchmark
# (decode and prefill, 1,000 rounds; the engine path for the proxy's share).
#
# Each step is separate, has its own timeout and log (OUT/<step>.log, the
# tail of a failing one is repeated on stdout), and the script goes on after
# a failure. Steps run most important first; once BUDGET seconds (default
# 280) have passed the rest are listed as skipped, so that a hang cannot eat
# the device time. About 3-4 minutes on one H200 when everything works.
#
#   scripts/device-moe.sh OUT_DIR            (BUDGET=600 scripts/device-moe.sh OUT for all)
set -uo pipefail
out=${1:?usage: scripts/device-moe.sh OUT_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$PWD/python XFER_LIBRARY=$PWD/build/libxfer.so XFER_MOE_CUDA_LIBRARY=$PWD/build/libxfer_moe_cuda.so
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
py=${PYTHON:-python3}
budget=${BUDGET:-280}
fails=0
skipped=0
start=$SECONDS
step() { # name, timeout (s), command...
	local name=$1 limit=$2
	shift 2
	if [ $((SECONDS - start)) -ge "$budget" ]; then
		echo "$name: skipped (the ${budget} s budget is spent)" | tee -a "$out/summary.txt"
		skipped=$((skipped + 1))
		return 0
	fi
	local t0=$SECONDS
	timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
	local rc=$?
	echo "$name: rc=$rc in $((SECONDS - t0)) s$([ $rc -eq 124 ] && echo ' (timed out)')" | tee -a "$out/summary.txt"
	if [ $rc -ne 0 ]; then
		fails=$((fails + 1))
		tail -n 25 "$out/$name.log" | sed "s/^/    $name| /"
	fi
	return 0
}
t=python/tests/moe_ranks.py
b=python/bench/moe_bench.py
: >"$out/summary.txt"
step env 30 bash -c "nvidia-smi; nvidia-smi -q | grep -i -E 'compute mode|mig mode|driver version'; \
	$py -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.device_count(), \"GPU(s)\")'; \
	ls -la build/libxfer.so* build/libxfer_moe_cuda.so; \
	$py -c 'from xfer import _moe_lib as m; print(\"libxfer_moe_cuda version\", m.g.cuda_version(), m.CUDA_LIBRARY_PATH)'"
# 1. the same-host path, 2 ranks on one GPU: bf16, then fp8 quantized by the kernel with the halves split
step gpu-2-ipc 60 $py $t --world 2 --device cuda --mode ipc --rounds 12 --variants fp8-split
# 2. the benchmark on it (the shapes)
step bench-decode-ipc 90 $py $b --shape decode --world 2 --mode ipc --iters 1000 --json "$out/bench-decode-ipc.json"
step bench-prefill-ipc 120 $py $b --shape prefill --world 2 --mode ipc --iters 1000 --per-graph 20 --json "$out/bench-prefill-ipc.json"
# 3. the engine path (every rank remote: staged over tcp, XFER_GPU_IPC=0), its benchmark (the proxy's share)
step gpu-2-engine 60 $py $t --world 2 --device cuda --mode engine --rounds 8 --variants fp8
step bench-decode-engine 90 $py $b --shape decode --world 2 --mode engine --iters 300 --per-graph 20 --json "$out/bench-decode-engine.json"
# 4. four ranks: one host, then hosts of two (IPC and the engine at once), then all remote
step gpu-4-ipc 60 $py $t --world 4 --device cuda --mode ipc --rounds 8 --variants fp8
step gpu-4-mixed 90 $py $t --world 4 --device cuda --mode mixed --rounds 8 --variants fp8-split
step gpu-4-engine 90 $py $t --world 4 --device cuda --mode engine --rounds 6 --layout packed
# 5. CUDA graphs: a whole round captured, replayed with new inputs
step gpu-2-graph-ipc 60 $py $t --world 2 --device cuda --mode ipc --check graph
step gpu-2-graph-engine 60 $py $t --world 2 --device cuda --mode engine --check graph
# 6. the other wait modes (spinning kernels on a shared GPU; stream waits on host flags)
step gpu-2-ipc-kernelwait 60 $py $t --world 2 --device cuda --mode ipc --rounds 6 --gpu-wait kernel
step bench-decode-ipc-kernelwait 60 $py $b --shape decode --world 2 --mode ipc --gpu-wait kernel --iters 200 --per-graph 20
step gpu-2-engine-streamwait 60 $py $t --world 2 --device cuda --mode engine --rounds 6 --gpu-wait stream
step bench-decode-engine-streamwait 60 $py $b --shape decode --world 2 --mode engine --gpu-wait stream --iters 300 --per-graph 20
echo "device-moe: $fails step(s) failed, $skipped skipped, $((SECONDS - start)) s" | tee -a "$out/summary.txt"
exit $((fails > 0))
