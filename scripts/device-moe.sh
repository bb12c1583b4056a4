#!/usr/bin/env bash
# xfer.moe on a GPU machine, from a carried build/ (builds nothing): the GPU
# correctness checks (2 and 4 ranks as processes on the GPU(s) here, through
# the engine path staged over tcp, the same-host CUDA IPC path, and both at
# once; fp8; split halves; a CUDA graph), and the benchmark (decode and
# prefill, 1,000 rounds; the engine path for the proxy's share).
#
# Ranks that share one GPU as processes are time-sliced by the driver unless
# the CUDA MPS control daemon runs: the script starts one (its pipe and log
# directories under /tmp, stopped at exit; it changes no GPU setting) where
# nvidia-cuda-mps-control exists and a client then sees MPS, and says in
# summary.txt whether it did. With MPS=0 it does not try. One step
# (bench-decode-ipc-nomps) runs without MPS for the comparison.
#
# Each step is separate, has its own timeout and log (OUT/<step>.log, the
# tail of a failing one is repeated on stdout), and the script goes on after
# a failure. Steps run most important first (ORDER=figures, the default: the
# benchmarks; ORDER=full: the correctness checks first); once BUDGET seconds (default
# 80) have passed the rest are listed as skipped, so that a hang cannot eat
# the device time. About 100 s on one H200 by default; BUDGET=200 ORDER=full for the checks.
#
# ORDER moe4: the decode figure, the checks with this build's defaults, a SIGKILLed rank, the A/Bs.
#
#   scripts/device-moe.sh OUT_DIR [ORDER]  (BUDGET=600 for all; DEVICE=cpu: a dry run of the CPU-capable
#                                      steps; TSCALE=N multiplies every step's timeout)
#
# ORDER diag (the second argument, or ORDER=diag): the benchmarks with the
# kernels' own stamps (--trace: where each round's time goes, on one clock
# for both processes), then the correctness checks, the engine path, and
# variants (50 % SMs per rank, eager launches). In diag order a step starts
# only if its timeout still fits in BUDGET (default 140 s), so the whole run
# stays within it.
set -uo pipefail
out=${1:?usage: scripts/device-moe.sh OUT_DIR [figures|full|diag|moe4]}
ORDER=${2:-${ORDER:-figures}}
[ "$ORDER" = diag ] && BUDGET=${BUDGET:-140}
[ "$ORDER" = moe4 ] && BUDGET=${BUDGET:-150} # a step starts while under it: ~140 s in all (every step ~10-20 s)
BUDGET=${BUDGET:-80}
[ "$ORDER" = diag ] && STEP_FIT=1 # a step starts only if its timeout still fits
. "$(dirname "$0")/device-lib.sh" # the environment, step NAME TIMEOUT COMMAND..., OUT/summary.txt
export XFER_MOE_CUDA_LIBRARY=$PWD/build/libxfer_moe_cuda.so PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
dev=${DEVICE:-cuda}
iters=${ITERS:-1000}
pf=""
if [ "$dev" = cpu ]; then # a dry run: few rounds, a small prefill
	iters=${ITERS:-20}
	pf="--max-tokens 64"
fi
note() { step_note "$@"; }

# ------------------------------------------------------------------ MPS
mps=off
mps_why="not tried"
mps_ctl=$(command -v nvidia-cuda-mps-control || true)
mps_stop() {
	if [ "$mps" = on ]; then
		echo quit | "$mps_ctl" >/dev/null 2>&1
		sleep 1
		rm -rf /tmp/xfer-mps-pipe /tmp/xfer-mps-log
	fi
}
finish() {
	mps_stop
	# one file for the lead's device tool, which brings back only a few
	tar czf "/tmp/moe-logs.$$.tgz" -C "$out" --exclude moe-logs.tar.gz . 2>/dev/null && mv "/tmp/moe-logs.$$.tgz" "$out/moe-logs.tar.gz"
}
trap finish EXIT
if [ "$dev" != cuda ]; then
	mps_why="device $dev"
elif [ "${MPS:-1}" = 0 ]; then
	mps_why="MPS=0"
elif [ -z "$mps_ctl" ]; then
	mps_why="nvidia-cuda-mps-control is not on this machine"
else
	export CUDA_MPS_PIPE_DIRECTORY=/tmp/xfer-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/xfer-mps-log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	if "$mps_ctl" -d >"$out/mps.log" 2>&1; then
		mps=on
		sleep 1
		# a client must work and see MPS, or every step would fail: else back to time slicing
		if timeout 60 $py -c 'import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()
from xfer import _moe_lib as m
v = m.g.cuda_mps_enabled(0); print("client: MPS enabled attribute", v); raise SystemExit(0 if v == 1 else 3)' \
			>>"$out/mps.log" 2>&1; then
			mps_why="daemon started, a client sees it"
		else
			mps_why="daemon started but a client failed or did not see MPS (mps.log): stopped"
			mps_stop
			mps=off
		fi
	else
		mps_why="nvidia-cuda-mps-control -d failed (mps.log)"
	fi
	if [ "$mps" = off ]; then
		unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
	fi
	cat "$CUDA_MPS_LOG_DIRECTORY/control.log" >>"$out/mps.log" 2>/dev/null
fi
note "mps: $mps ($mps_why)"

t=python/tests/moe_ranks.py
b=python/bench/moe_bench.py
step env 30 bash -c "nvidia-smi; nvidia-smi -q | grep -i -E 'compute mode|mig mode|driver version'; \
	$py -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.device_count(), \"GPU(s)\")'; \
	ls -la build/libxfer.so* build/libxfer_moe_cuda.so; \
	$py -c 'from xfer import _moe_lib as m; print(\"libxfer_moe_cuda version\", m.g.cuda_version(), m.CUDA_LIBRARY_PATH)'; \
	echo CUDA_MODULE_LOADING=\${CUDA_MODULE_LOADING:-unset} CUDA_DEVICE_MAX_CONNECTIONS=\${CUDA_DEVICE_MAX_CONNECTIONS:-unset}"

if [ "$ORDER" = diag ]; then
	# Where the time goes first (decode, prefill, with per-kernel stamps), then is it right
	# (same-host checks, the engine path, a graph, 4 ranks), then A/B variants of this build.
	step bench-decode-ipc 30 $py $b --device "$dev" --shape decode --world 2 --mode ipc --iters $iters --trace \
		--json "$out/bench-decode-ipc.json"
	step gpu-2-ipc 25 $py $t --world 2 --device "$dev" --mode ipc --rounds 12 --variants fp8-split
	step bench-prefill-ipc 40 $py $b --device "$dev" --shape prefill --world 2 --mode ipc --iters $iters --per-graph 20 \
		$pf --trace --json "$out/bench-prefill-ipc.json"
	step gpu-2-engine 25 $py $t --world 2 --device "$dev" --mode engine --rounds 4
	[ "$dev" = cuda ] && step gpu-2-graph-ipc 25 $py $t --world 2 --device cuda --mode ipc --check graph
	step gpu-4-ipc 30 $py $t --world 4 --device "$dev" --mode ipc --rounds 8 --variants fp8-split
	# A/B: programmatic dependent launch (off by default), system-scope fences everywhere (as
	# before), the waits in kernels of their own
	step bench-decode-ipc-pdl 20 env XFER_MOE_PDL=1 $py $b --device "$dev" --shape decode --world 2 --mode ipc \
		--iters $iters --trace
	step gpu-2-ipc-pdl 25 env XFER_MOE_PDL=1 $py $t --world 2 --device "$dev" --mode ipc --rounds 12 --variants fp8-split
	step bench-decode-ipc-sysfence 20 env XFER_MOE_SYS_FENCES=1 $py $b --device "$dev" --shape decode --world 2 \
		--mode ipc --iters $iters --trace
	step bench-decode-ipc-nofuse 20 env XFER_MOE_FUSE=0 $py $b --device "$dev" --shape decode --world 2 --mode ipc \
		--iters $iters --trace
	step bench-decode-engine 30 $py $b --device "$dev" --shape decode --world 2 --mode engine --iters 300 --per-graph 20 \
		--trace --json "$out/bench-decode-engine.json"
	step bench-decode-ipc-sm50 20 $py $b --device "$dev" --shape decode --world 2 --mode ipc --iters $iters --trace \
		--sm-percent 50 --json "$out/bench-decode-ipc-sm50.json"
elif [ "$ORDER" = moe4 ]; then
	# Branch moe4 (about 140 s; BUDGET=150 reaches the A/Bs): the decode figure with this build's defaults
	# (the route kernel a block per token, programmatic dependent launch on), is it right with them (2 and 4
	# ranks, a graph, the engine path with 2 and 4 ranks), a rank killed by SIGKILL mid-round (same-host
	# and engine path: the others must fail naming it within the 3 s deadline, never hang), then the A/B
	# of each default against the old way.
	step bench-decode-ipc 25 $py $b --device "$dev" --shape decode --world 2 --mode ipc --iters $iters --trace \
		--json "$out/bench-decode-ipc.json"
	step gpu-2-ipc 25 $py $t --world 2 --device "$dev" --mode ipc --rounds 12 --variants fp8-split
	step gpu-2-kill-ipc 30 $py $t --world 2 --device "$dev" --mode ipc --check dead --sigkill --timeout-ms 3000
	step gpu-4-ipc 25 $py $t --world 4 --device "$dev" --mode ipc --rounds 8 --variants fp8-split
	[ "$dev" = cuda ] && step gpu-2-graph-ipc 20 $py $t --world 2 --device cuda --mode ipc --check graph
	step gpu-2-engine 25 $py $t --world 2 --device "$dev" --mode engine --rounds 4
	step gpu-4-engine 30 $py $t --world 4 --device "$dev" --mode engine --rounds 6 --layout packed --variants fp8
	step gpu-2-kill-engine 30 $py $t --world 2 --device "$dev" --mode engine --check dead --sigkill --timeout-ms 3000
	step bench-decode-ipc-nopdl 20 env XFER_MOE_PDL=0 $py $b --device "$dev" --shape decode --world 2 --mode ipc \
		--iters $iters --trace
	step bench-decode-ipc-unfused 20 env XFER_MOE_ROUTE_PACK=0 $py $b --device "$dev" --shape decode --world 2 \
		--mode ipc --iters $iters --trace
	step bench-decode-ipc-narrow 20 env XFER_MOE_ROUTE_WIDE=0 $py $b --device "$dev" --shape decode --world 2 \
		--mode ipc --iters $iters --trace
elif [ "$ORDER" = figures ]; then
	# The figures first (the docs' decode and prefill, same-host; then the engine path's proxy share),
	# then the correctness checks, the engine path's last (it hung in two runs: docs/moe.md).
	step bench-decode-ipc 35 $py $b --device "$dev" --shape decode --world 2 --mode ipc --iters $iters --json "$out/bench-decode-ipc.json"
	step bench-prefill-ipc 50 $py $b --device "$dev" --shape prefill --world 2 --mode ipc --iters $iters --per-graph 20 $pf \
		--json "$out/bench-prefill-ipc.json"
	step bench-decode-engine 35 $py $b --device "$dev" --shape decode --world 2 --mode engine --iters $iters --per-graph 20 \
		--json "$out/bench-decode-engine.json"
	step gpu-2-ipc 25 $py $t --world 2 --device "$dev" --mode ipc --rounds 12 --variants fp8-split
	step gpu-4-ipc 30 $py $t --world 4 --device "$dev" --mode ipc --rounds 8 --variants fp8-split
	[ "$dev" = cuda ] && step gpu-2-graph-ipc 25 $py $t --world 2 --device cuda --mode ipc --check graph
	step gpu-2-engine 30 $py $t --world 2 --device "$dev" --mode engine --rounds 4
else
	# 1. the engine path (every rank remote: staged over tcp, XFER_GPU_IPC=0), which failed in the first run
	#    (the proxy's staging copies never finished while a wait kernel spun). If it fails again, two
	#    suspects apart: a lazy kernel load synchronizing the context (CUDA_MODULE_LOADING=EAGER), and the
	#    engine's copy stream sharing a hardware queue with the spinning kernel's stream (more queues:
	#    CUDA_DEVICE_MAX_CONNECTIONS=32; torch makes dozens of streams, the default is 8 queues). Whichever
	#    passes is kept for every later step, and summary.txt says so.
	if ! step gpu-2-engine 40 $py $t --world 2 --device "$dev" --mode engine --rounds 6 --variants fp8; then
		if step gpu-2-engine-eager 40 env CUDA_MODULE_LOADING=EAGER $py $t --world 2 --device "$dev" --mode engine --rounds 4; then
			export CUDA_MODULE_LOADING=EAGER
			note "kept for the later steps: CUDA_MODULE_LOADING=EAGER"
		elif step gpu-2-engine-conn32 40 env CUDA_DEVICE_MAX_CONNECTIONS=32 $py $t --world 2 --device "$dev" --mode engine --rounds 4; then
			export CUDA_DEVICE_MAX_CONNECTIONS=32
			note "kept for the later steps: CUDA_DEVICE_MAX_CONNECTIONS=32"
		fi
	fi
	# 2. the same-host path, 2 ranks on one GPU: bf16, then fp8 quantized by the kernel with the halves split
	step gpu-2-ipc 40 $py $t --world 2 --device "$dev" --mode ipc --rounds 12 --variants fp8-split
	# 3. the benchmark (the issue's decode shape), same-host, then the engine path (the proxy's share)
	step bench-decode-ipc 60 $py $b --device "$dev" --shape decode --world 2 --mode ipc --iters $iters --json "$out/bench-decode-ipc.json"
	step bench-decode-engine 60 $py $b --device "$dev" --shape decode --world 2 --mode engine --iters $iters --per-graph 20 \
		--json "$out/bench-decode-engine.json"
	# 4. four ranks: one host, all remote, then hosts of two (IPC and the engine at once)
	step gpu-4-ipc 45 $py $t --world 4 --device "$dev" --mode ipc --rounds 8 --variants fp8-split
	step gpu-4-engine 50 $py $t --world 4 --device "$dev" --mode engine --rounds 6 --layout packed --variants fp8
	# 5. prefill (4096 tokens per rank): the benchmark also captures and replays CUDA graphs
	step bench-prefill-ipc 80 $py $b --device "$dev" --shape prefill --world 2 --mode ipc --iters $iters --per-graph 20 $pf \
		--json "$out/bench-prefill-ipc.json"
	if [ "$dev" = cuda ]; then
		# 6. CUDA graphs: a whole round captured, replayed with new inputs
		step gpu-2-graph-ipc 40 $py $t --world 2 --device cuda --mode ipc --check graph
		step gpu-2-graph-engine 40 $py $t --world 2 --device cuda --mode engine --check graph
	fi
	# 7. decode without MPS for the comparison, then mixed hosts
	if [ "$mps" = on ]; then
		step bench-decode-ipc-nomps 45 env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY \
			$py $b --device cuda --shape decode --world 2 --mode ipc --iters $iters --per-graph 50 \
			--json "$out/bench-decode-ipc-nomps.json"
	fi
	step gpu-4-mixed 60 $py $t --world 4 --device "$dev" --mode mixed --rounds 8 --variants fp8-split
fi
note "device-moe: $fails step(s) failed, $skipped skipped, $((SECONDS - step_start)) s, mps $mps"
exit $((fails > 0))
