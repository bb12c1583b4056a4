# shellcheck shell=bash disable=SC2154 # $out: set by the sourcing script
# Sourced by the device scripts (scripts/device-*.sh, run on the GPU machine from a
# carried build/: they build nothing) with $out set: the carried build's environment and
# the one step runner they share, so that every script's steps time out, log, skip and
# count the same way.
#
#   step NAME TIMEOUT COMMAND...
#     runs COMMAND under `timeout -k STEP_KILL TIMEOUT*TSCALE` with its output in OUT/NAME.log
#     (first line: the time and the command), adds "NAME: rc=N in S s" to $STEP_SUMMARY
#     (and stdout), repeats a failing step's last $STEP_TAIL log lines on stdout and goes
#     on: it returns the command's status (callers may branch on it; none uses set -e).
#     Exit 77 means skipped (no GPU here), not failed. Counters: fails, skipped.
#
# Settings, read at each step (set them before sourcing or before the steps):
#   STEP_SUMMARY   the one-line-per-step file (default OUT/summary.txt, emptied here)
#   BUDGET         seconds, from sourcing this file: once no more than STEP_MIN_LEFT
#                  (default 1) of them are left, later steps are listed as skipped,
#                  so that a hang cannot eat the device time (unset: no budget)
#   STEP_FIT=1     a step starts only if its whole timeout fits in what is left
#   STEP_CLIP=1    a step's timeout is cut to what is left (no step runs past BUDGET)
#   STEP_TAIL      lines of a failing step's log repeated on stdout (default 30; 0: none)
#   TSCALE         multiplies every step's timeout (default 1; a slower machine)
#   STEP_KILL      seconds between a timed-out step's SIGTERM and its SIGKILL (default 10)
mkdir -p "$out"
chmod +x build/bin/* 2>/dev/null
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d .devlibs ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$PWD/.devlibs # runtime libraries carried along
export PYTHONPATH=$PWD/python XFER_LIBRARY=$PWD/build/libxfer.so PYTHONDONTWRITEBYTECODE=1
# NVLink multicast off for NCCL, torch and NVSHMEM (the lent machines must not use it)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STEP_SUMMARY=${STEP_SUMMARY:-$out/summary.txt}
: >"$STEP_SUMMARY"
fails=0
skipped=0
step_start=$SECONDS
step_note() { echo "$*" | tee -a "$STEP_SUMMARY"; }
step() { # name, timeout (s), command...
	local name=$1 limit=$(($2 * ${TSCALE:-1}))
	shift 2
	if [ -n "${BUDGET:-}" ]; then
		local left=$((BUDGET - (SECONDS - step_start)))
		if [ "$left" -lt "${STEP_MIN_LEFT:-1}" ] || { [ "${STEP_FIT:-0}" = 1 ] && [ "$limit" -gt "$left" ]; }; then
			step_note "$name: skipped (the ${BUDGET} s budget is spent)"
			skipped=$((skipped + 1))
			return 0
		fi
		[ "${STEP_CLIP:-0}" = 1 ] && [ "$limit" -gt "$left" ] && limit=$left
	fi
	local t0=$SECONDS
	echo "# $(date -u +%T) $*" >"$out/$name.log"
	timeout -k "${STEP_KILL:-10}" "$limit" "$@" >>"$out/$name.log" 2>&1
	local rc=$?
	local why=
	[ $rc -eq 124 ] && why=" (timed out at $limit s)"
	[ $rc -eq 77 ] && why=" (skipped: no GPU)"
	step_note "$name: rc=$rc in $((SECONDS - t0)) s$why"
	if [ $rc -eq 77 ]; then
		skipped=$((skipped + 1))
	elif [ $rc -ne 0 ]; then
		fails=$((fails + 1))
		[ "${STEP_TAIL:-30}" -gt 0 ] && tail -n "${STEP_TAIL:-30}" "$out/$name.log" | sed "s/^/    $name| /"
	fi
	return $rc
}
