#!/bin/sh
# `make install` as a packager uses it: DESTDIR and a prefix other than the
# configured one, everything under that prefix, then the tree MOVED elsewhere
# (relocatable) and used from there: an external program built with
# pkg-config and one with CMake find_package (shared and static), and an
# installed tool run with no LD_LIBRARY_PATH (its RUNPATH finds libxfer).
#
#   install_tree.sh BUILD_DIR CONSUMER_SOURCE_DIR
set -eu
build=$1
consumer=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
	echo "install_tree: FAIL: $*" >&2
	exit 1
}
unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH || true

prefix=/opt/xfer-install-test # only ever written under DESTDIR
DESTDIR=$tmp/dest cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
	{ cat "$tmp/install.log" >&2; fail "cmake --install"; }
root=$tmp/dest$prefix
[ -d "$root" ] || fail "nothing under DESTDIR/$prefix"
outside=$(find "$tmp/dest" -mindepth 1 ! -type d ! -path "$root/*")
[ -z "$outside" ] || fail "installed outside the prefix: $outside"
[ ! -e "$prefix" ] || fail "$prefix exists: DESTDIR was not honoured"

# Relocatable: nothing may depend on the prefix it was installed for.
mv "$root" "$tmp/moved"
root=$tmp/moved
pc=$(find "$root" -name xfer.pc)
[ -n "$pc" ] || fail "no xfer.pc"
libdir=$(dirname "$(dirname "$pc")")
for f in bin/xfer-info bin/xfer-bench bin/xfer-demo include/xfer.h include/xfer_kv.h \
	share/man/man1/xfer-info.1 share/man/man1/xfer-bench.1 share/man/man1/xfer-demo.1 \
	share/man/man7/xfer.7 share/xfer/plot_bench.py share/doc/xfer/LICENSE share/doc/xfer/config.md; do
	[ -e "$root/$f" ] || fail "missing $f"
done
for f in libxfer.so.0 libxfer.a cmake/xfer/xferConfig.cmake cmake/xfer/xferTargets.cmake; do
	[ -e "$libdir/$f" ] || fail "missing $libdir/$f"
done
echo "install_tree: $(find "$root" ! -type d | wc -l) files under the prefix, libdir ${libdir#$root/}"

# The tools: RUNPATH relative to themselves, run with no help.
for t in xfer-info xfer-bench xfer-demo; do
	rp=$(readelf -d "$root/bin/$t" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
	case "$rp" in
	'$ORIGIN/../lib'*) ;;
	*) fail "$t: RUNPATH '$rp', want \$ORIGIN/../lib..." ;;
	esac
done
out=$("$root/bin/xfer-info" --version) || fail "installed xfer-info --version"
echo "install_tree: $out"
"$root/bin/xfer-info" --provider tcp --nics lo >"$tmp/info.txt" || fail "installed xfer-info on tcp/lo"
grep -q "tcp;ofi_rxm" "$tmp/info.txt" || fail "installed xfer-info did not open tcp"
ldd "$root/bin/xfer-info" | grep -q "libxfer.so.0 => $root/" || fail "xfer-info does not load the installed libxfer"

# pkg-config, from the moved tree (prefix=${pcfiledir}/...).
export PKG_CONFIG_PATH="$libdir/pkgconfig"
incl=$(pkg-config --variable=includedir xfer)
[ "$(cd "$incl" && pwd)" = "$root/include" ] || fail "pkg-config includedir $incl, not $root/include"
pkg-config --static --libs xfer >/dev/null || fail "pkg-config --static (Requires.private unresolved)"
# shellcheck disable=SC2046
cc -std=c11 -o "$tmp/pc_consumer" "$consumer/consumer.c" $(pkg-config --cflags --libs xfer) \
	-Wl,-rpath,"$libdir" || fail "building with pkg-config"
"$tmp/pc_consumer" || fail "the pkg-config consumer"

# CMake find_package(xfer): xfer::xfer and xfer::xfer_static.
cmake -S "$consumer" -B "$tmp/cmake_consumer" -DCMAKE_PREFIX_PATH="$root" >"$tmp/cmake.log" 2>&1 ||
	{ cat "$tmp/cmake.log" >&2; fail "configuring with find_package(xfer)"; }
cmake --build "$tmp/cmake_consumer" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log" >&2; fail "building with CMake"; }
"$tmp/cmake_consumer/consumer" || fail "the find_package consumer (xfer::xfer)"
"$tmp/cmake_consumer/consumer_static" || fail "the find_package consumer (xfer::xfer_static)"
ldd "$tmp/cmake_consumer/consumer_static" | grep -q libxfer && fail "xfer::xfer_static links libxfer.so"
echo "install_tree: PASS"
