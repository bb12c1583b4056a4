#!/usr/bin/env bash
# GPU checks for the layered core (branch restructure): the GPU paths moved
# (core/path.c, core/notice.c, gpu/gpu_copy.c), and only a real GPU covers
# them beyond the fake driver. Builds nothing: run it from the repository
# root with a build/ of this branch carried over (and, for the benchmark's
# before/after, a build of the previous commit as OLD_BUILD).
#
#   scripts/device-restructure.sh OUT_DIR [OLD_BUILD]
#
# Steps (about 4 minutes on 1x H200, of which the old build's benchmark 1):
#   gpu-tests    tests/gpu/run_on_device.sh without its benchmarks: test_gpu
#                ipc, staged, h2g, g2h, native, scatter-* on shm and tcp, and
#                the watcher in a CUDA Graph
#   python-gpu   the Python tests that use torch CUDA tensors
#   gpu-bench    xfer-gpu-bench of this build (IPC and staged paths vs
#                cudaMemcpyPeerAsync), then of OLD_BUILD when given
set -uo pipefail
out=${1:?usage: scripts/device-restructure.sh OUT_DIR [OLD_BUILD]}
old=${2:-}
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
step gpu-tests env XFER_GPU_SKIP_BENCH=1 bash tests/gpu/run_on_device.sh "$out"
grep -q 'GPU runs with failures: 0' "$out/gpu-tests.log" || fails=$((fails + 1))
step python-gpu timeout 240 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_pair_cuda.py \
	python/tests/test_watcher.py python/tests/test_signal.py python/tests/test_misc.py \
	-k "cuda or torch or gpu or graph"
step gpu-bench timeout 150 build/bin/xfer-gpu-bench
if [ -n "$old" ]; then
	old=$(cd "$old" && pwd)
	chmod +x "$old"/bin/* 2>/dev/null
	step gpu-bench-old env LD_LIBRARY_PATH="$old${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 150 \
		"$old/bin/xfer-gpu-bench"
fi
echo "device-restructure: $fails step(s) failed"
exit $((fails > 0))
