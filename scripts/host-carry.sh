#!/usr/bin/env bash
# Copies what scripts/device-host.sh needs from builds made here into one
# small folder to carry to the GPU machine (about 4 MB): DEST/new and, when
# given, DEST/old and DEST/main, each with bin/xfer-bench and libxfer.so.0
# (a plain file: links to outside the folder would not travel).
#
#   scripts/host-carry.sh DEST [BUILD [OLD_BUILD [MAIN_BUILD]]]   (BUILD default build)
set -euo pipefail
dest=${1:?usage: scripts/host-carry.sh DEST [BUILD [OLD_BUILD]]}
copy() { # build, side
	mkdir -p "$dest/$2/bin"
	cp "$1/bin/xfer-bench" "$dest/$2/bin/"
	cp -L "$1/libxfer.so.0" "$dest/$2/libxfer.so.0"
}
rm -rf "$dest"
copy "${2:-build}" new
[ -n "${3:-}" ] && copy "$3" old
[ -n "${4:-}" ] && copy "$4" main
du -sh "$dest"
