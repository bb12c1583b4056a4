#!/usr/bin/env bash
# Packs a commit for the GPU machine, which has the CUDA and libfabric
# runtimes but no headers, so nothing is built there: the source of REV of
# WORKTREE plus a RelWithDebInfo build of it made here (stripped bin/,
# libxfer*.so, build/python) go to .dev/NAME of this checkout (ignored by
# git, ~15 MB a tree), which the device call carries (carry: [".dev"];
# its limit is 64 MiB in all). The build folder persists under DEVBUILD
# so that packing the same NAME again is incremental.
#
#   scripts/device-pack.sh NAME WORKTREE [REV]     (DEVBUILD default /tmp/xfer-devbuild, JOBS default 2)
# then on the device:  bash scripts/device-batch.sh NAME[@TREE]:SECONDS[:ARGS] ...
set -euo pipefail
name=${1:?usage: scripts/device-pack.sh NAME WORKTREE [REV]} wt=${2:?worktree} rev=${3:-HEAD}
top=$(cd "$(dirname "$0")/.." && pwd)
dst=$top/.dev/$name bld=${DEVBUILD:-/tmp/xfer-devbuild}/$name
py=${XFER_PYTHON:-$(command -v python3)}
[ -x "$top/build/venv/bin/python" ] && py=${XFER_PYTHON:-$top/build/venv/bin/python}
commit=$(git -C "$wt" rev-parse "$rev")
# Unpack beside, then copy only what changed (by checksum), so that the
# build below stays incremental when a tree is packed again.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
git -C "$wt" archive "$commit" | tar x -C "$stage"
mkdir -p "$dst" "$bld"
rsync -rlpD --checksum --delete --exclude=/build --exclude=/.commit "$stage"/ "$dst"/
echo "$commit" >"$dst/.commit"
cmake -S "$dst" -B "$bld" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXFER_BUILD_TESTS=ON -DXFER_PYTHON="$py" \
	>"$bld.configure.log" 2>&1 || { tail -30 "$bld.configure.log"; exit 1; }
nice cmake --build "$bld" -j"${JOBS:-2}" >"$bld.build.log" 2>&1 || { tail -30 "$bld.build.log"; exit 1; }
rm -rf "$dst/build" && mkdir -p "$dst/build/bin"
cp -a "$bld"/bin/. "$dst/build/bin/"
cp -a "$bld"/*.so* "$dst/build/" 2>/dev/null || true
[ -d "$bld/python" ] && cp -a "$bld/python" "$dst/build/"
strip --strip-debug "$dst"/build/bin/* "$dst"/build/*.so* 2>/dev/null || true
echo "$name: $commit, $(du -sh "$dst" | cut -f1) in $dst"
