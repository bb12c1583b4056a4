#!/usr/bin/env bash
# Runs the GPU tests and benchmarks on a GPU machine from a build made
# elsewhere (the `build` folder carried over). Libraries the machine may lack
# can be put in .devlibs/. Output: one log per step under $1 (default .).
out=${1:-.}
chmod +x build/bin/* 2>/dev/null # a carried copy may lose its modes
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
missing=$(ldd build/bin/test_gpu | grep 'not found')
if [ -n "$missing" ] && [ -d .devlibs ]; then
	echo "using carried libraries for: $missing"
	export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$PWD/.devlibs
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -5
fails=0
skips=0
# native and scatter-native need a provider that registers GPU memory in
# place (FI_HMEM); elsewhere they exit 77 and count as skipped.
for p in shm tcp; do
	for mode in ipc staged h2g g2h native scatter-ipc scatter-staged scatter-native; do
		echo "== test_gpu $mode on $p"
		XFER_TEST_PROVIDER=$p timeout 120 build/bin/test_gpu $mode
		rc=$?
		if [ $rc -eq 77 ]; then
			echo "SKIPPED: $mode on $p"; skips=$((skips+1))
		elif [ $rc -ne 0 ]; then
			echo "FAILED: $mode on $p (rc $rc)"; fails=$((fails+1))
		fi
	done
done
echo "== watcher in a CUDA Graph"
timeout 60 build/bin/test_gpu watcher || { echo "FAILED: watcher"; fails=$((fails+1)); }
if [ -z "${XFER_GPU_SKIP_BENCH:-}" ]; then
	echo "== xfer-gpu-bench"
	timeout 300 build/bin/xfer-gpu-bench || { echo "FAILED: bench"; fails=$((fails+1)); }
	echo "== NCCL send/recv through PyTorch"
	timeout 200 python3 tests/gpu/nccl_sendrecv.py
fi
echo "GPU runs with failures: $fails, skipped: $skips"
[ "$fails" -eq 0 ]
