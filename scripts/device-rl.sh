#!/usr/bin/env bash
# RL weight updates on the GPU machine (one H200), from a carried build/.
# Most important first, each step with its own timeout inside one overall
# budget, continuing after failures:
#   fp8-check            xfer.rl.fp8.quantize on CUDA vs the CPU, bit for bit
#                        (the first run's demo failures came from there)
#   demo-cuda-4to2       4 trainers -> 2 inference ranks, CUDA tensors, tcp,
#                        double buffer, 3 steps verified bit-exact
#   demo-cuda-3to2-1buf  3 trainers (uneven shards), shm, one buffer (pause/resume)
#   demo-cuda-fault      rank 1 killed mid-update, replaced, 2 more steps
#   demo-cuda-offload    shards in pinned host memory (the H2D stage)
#   demo-cuda-staged     as 4to2 with XFER_GPU_IPC=0: the staged path instead of CUDA IPC
#   gpu-prep             H200 preparation throughputs for the simulator (h200-prep.json)
#   sim                  only with a second argument "sim" (CPU only; it can run anywhere)
# The demos share the GPU between all their processes; on a mismatch each
# inference rank logs its first differing tensors in full (reference vs
# received values and scales, stale/zero/formula diagnosis) and the header
# says which write path was used. About 2.5 minutes; never more than
# RL_BUDGET_S (default 230) seconds. Everything lands in ONE file,
# OUT_DIR/rl-logs.tar.gz (the device tool returns only a few files), with
# OUT_DIR/summary.txt beside it.
#
#   scripts/device-rl.sh OUT_DIR [sim]
set -uo pipefail
top=${1:?usage: scripts/device-rl.sh OUT_DIR [sim]}
out=$top/rl.d
# the shared runner (scripts/device-lib.sh): a step starts only with 15 s of the
# budget left and never runs past it
BUDGET=${RL_BUDGET_S:-230} STEP_MIN_LEFT=15 STEP_CLIP=1
. "$(dirname "$0")/device-lib.sh"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
# a tree packed by scripts/device-pack.sh has no .git of its own (a git log would name the enclosing checkout)
if [ -f .commit ]; then echo "commit $(cat .commit) (packed tree)" >>"$out/summary.txt"
else git log -1 --format='commit %H %s' >>"$out/summary.txt" 2>/dev/null; fi
demo="python3 python/bench/rl_demo.py --device cuda"
step fp8-check 60 python3 python/bench/rl_fp8_check.py
step demo-cuda-4to2 70 $demo --trainers 4 --node 2 --ranks 2 --steps 3
step demo-cuda-3to2-1buf 60 $demo --trainers 3 --node 3 --ranks 2 --buffers 1 --provider shm --steps 2
step demo-cuda-fault 80 $demo --fault
step demo-cuda-offload 60 $demo --offload --steps 2
step demo-cuda-staged 60 env XFER_GPU_IPC=0 $demo --trainers 4 --node 2 --ranks 2 --steps 2
step gpu-prep 60 python3 python/bench/rl_gpu_prep.py --out "$out/h200-prep.json"
if [ "${2:-}" = sim ]; then
	cp docs/rl/engine-costs.json "$out/" 2>/dev/null
	step sim 240 python3 -m xfer.rl.sim --table --measured "$out" --json "$out/sim-table.json"
fi
fails=$((fails + skipped)) # a step the budget left out counts as failed here
echo "device-rl: $fails step(s) failed or skipped in $SECONDS s" | tee -a "$out/summary.txt"
cp "$out/summary.txt" "$top/summary.txt"
tar czf "$top/rl-logs.tar.gz" -C "$top" rl.d && rm -rf "$out"
exit $((fails > 0))
