#!/usr/bin/env bash
# Runs on the GPU machine: the device scripts of trees packed by
# scripts/device-pack.sh, one after the other in one call (the machine is
# lent by the minute, and each call costs a start). The device tool returns
# only a few files, so every log goes into one tarball, $OUT/logs.tgz, with
# $OUT/summary.txt beside it (one line per script: rc and seconds).
#
#   bash scripts/device-batch.sh NAME[@TREE]:SECONDS[:ARGS] ...
#     NAME   runs scripts/device-NAME.sh OUTDIR ARGS inside .dev/TREE (TREE default NAME)
#     SECONDS  its wall-clock limit (killed after it; the next one runs)
#     ENV_NAME="VAR=value ..."  (an environment variable) adds variables for that script only
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
top=$(cd "$(dirname "$0")/.." && pwd)
final=${OUT:?OUT: the folder whose files come back}
work=$(mktemp -d)
{ date -u; nproc; nvidia-smi -L; ldconfig -p | grep -i fabric; python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())'; } >"$work/machine.txt" 2>&1
t_all=$SECONDS
for spec in "$@"; do
	head=${spec%%:*} rest=${spec#*:}
	name=${head%%@*} tree=${head#*@}
	secs=${rest%%:*} args=
	[ "$rest" != "$secs" ] && args=${rest#*:}
	dir=$top/.dev/$tree
	chmod +x "$dir"/build/bin/* "$dir"/scripts/*.sh 2>/dev/null
	# one folder per spec: the same script may run in several trees
	res=$work/$name-$tree
	[ "$tree" = "$name" ] && res=$work/$name
	# the same script twice in one tree (two plans): a folder each, -2, -3, ...
	n=1 base=$res
	while [ -e "$res" ]; do n=$((n + 1)) res=$base-$n; done
	mkdir -p "$res"
	t0=$SECONDS
	envvar=ENV_$name
	# shellcheck disable=SC2086 # ARGS and ENV_NAME are word lists by design
	(cd "$dir" && timeout -k 5 "$secs" env ${!envvar:-} bash "scripts/device-$name.sh" "$res" $args) >"$res/stdout.txt" 2>&1
	echo "$head: rc=$? in $((SECONDS - t0)) s ($(cat "$dir/.commit" 2>/dev/null))" | tee -a "$work/summary.txt"
done
echo "all: $((SECONDS - t_all)) s" | tee -a "$work/summary.txt"
cp "$work/summary.txt" "$final/"
tar czf "$final/logs.tgz" -C "$work" .
rm -rf "$work"
