#!/usr/bin/env bash
# RL weight updates on the GPU machine (one H200), from a carried build/:
# preparation throughputs for the simulator, the multi-process demo with
# CUDA tensors (trainer and inference processes sharing the GPU; every
# tensor verified bit-exact after every step), the fault demo on CUDA, and
# CPU-offloaded shards (the H2D stage), and the simulator's table with the
# measured inputs. About 4 minutes.
#
#   scripts/device-rl.sh OUT_DIR
set -uo pipefail
out=${1:?usage: scripts/device-rl.sh OUT_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d .devlibs ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$PWD/.devlibs
export PYTHONPATH=$PWD/python XFER_LIBRARY=$PWD/build/libxfer.so PYTHONDONTWRITEBYTECODE=1
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
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
step gpu-prep timeout 120 python3 python/bench/rl_gpu_prep.py --out "$out/h200-prep.json"
step demo-cuda-4to2 timeout 150 python3 python/bench/rl_demo.py --device cuda --trainers 4 --node 2 --ranks 2 --steps 3
step demo-cuda-3to2-1buf timeout 120 python3 python/bench/rl_demo.py --device cuda --trainers 3 --node 3 --ranks 2 \
	--buffers 1 --provider shm --steps 2
step demo-cuda-fault timeout 150 python3 python/bench/rl_demo.py --device cuda --fault
step demo-cuda-offload timeout 120 python3 python/bench/rl_demo.py --device cuda --offload --steps 2
cp docs/rl/engine-costs.json "$out/" 2>/dev/null
step sim timeout 240 python3 -m xfer.rl.sim --table --measured "$out" --json "$out/sim-table.json"
echo "device-rl: $fails step(s) failed"
exit $((fails > 0))
