#!/bin/sh
# The man pages format without a single groff warning.
#   man_pages.sh DIR PAGE...
set -eu
dir=$1
shift
command -v groff >/dev/null 2>&1 || { echo "SKIP: groff not installed (apt-get install groff-base)"; exit 77; }
bad=0
for p in "$@"; do
	w=$(groff -man -ww -z -Tutf8 "$dir/$p" 2>&1) || bad=1
	if [ -n "$w" ]; then
		echo "$p: $w" >&2
		bad=1
	fi
	grep -q '^\.SH NAME' "$dir/$p" || { echo "$p: no NAME section" >&2; bad=1; }
	if grep -q '@[A-Z_]*@' "$dir/$p"; then
		echo "$p: unsubstituted @VAR@" >&2
		bad=1
	fi
done
[ $bad = 0 ] && echo "man_pages: $# pages clean"
exit $bad
