# Sourced by scripts/device-gpu.sh (with $out set): the
# shared runner of every device script (scripts/device-lib.sh: the carried build's
# environment, step NAME TIMEOUT COMMAND..., exit 77 = skipped) with these scripts'
# summary file, OUT/steps.log, and their env.log.
STEP_SUMMARY=${STEP_SUMMARY:-$out/steps.log}
STEP_TAIL=${STEP_TAIL:-0} # their callers read the logs, not stdout
. "$(dirname "${BASH_SOURCE[0]}")/device-lib.sh"
export XFER_LOG_LEVEL=info # the library says whether the kernels loaded (and gives the trace summary)
{
	nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader
	ls -l build/gen/pages.fatbin 2>&1
} >"$out/env.log" 2>&1
