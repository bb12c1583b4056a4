# Sourced by scripts/device-gpu.sh and scripts/device-gpu3.sh (with $out set):
# the carried build's environment and their step runner, in one place.
#   step NAME TIMEOUT COMMAND...   OUT/NAME.log; a line in OUT/steps.log; exit 77 = skipped (no GPU)
mkdir -p "$out"
chmod +x build/bin/* 2>/dev/null
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d .devlibs ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$PWD/.devlibs
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XFER_LOG_LEVEL=info # the library says whether the kernels loaded (and gives the trace summary)
fails=0
step() { # name, timeout, command...
	local name=$1 t=$2
	shift 2
	local t0=$SECONDS
	{ echo "\$ $*"; timeout "$t" "$@"; } >"$out/$name.log" 2>&1
	local rc=$?
	echo "$name: rc=$rc in $((SECONDS - t0)) s$([ $rc -eq 77 ] && echo ' (skipped: no GPU)')" | tee -a "$out/steps.log"
	[ $rc -ne 0 ] && [ $rc -ne 77 ] && fails=$((fails + 1))
	return 0
}
{
	nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader
	ls -l build/gen/pages.fatbin 2>&1
} >"$out/env.log" 2>&1
