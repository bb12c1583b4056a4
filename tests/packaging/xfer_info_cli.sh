#!/bin/sh
# xfer-info's command line: --help and --version on stdout with exit 0, a
# usage error exits 2, a missing provider or NIC exits 1, and --json is one
# valid object whose "selected" engine is the one xfer_engine_create really
# gives (XFER_* variables and the provider's first NIC, not always tcp on lo).
#
#   xfer_info_cli.sh XFER_INFO PYTHON VERSION
set -u
xi=$1
py=$2
version=$3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
fail() {
	echo "xfer_info_cli: FAIL: $*" >&2
	bad=1
}
unset XFER_PROVIDER XFER_NICS XFER_LOG_LEVEL || true

"$xi" --help >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 0 ] || fail "--help exits $rc"
grep -q '^usage: xfer-info' "$tmp/out" || fail "--help: no usage on stdout"
[ -s "$tmp/err" ] && fail "--help wrote to stderr: $(cat "$tmp/err")"

out=$("$xi" --version)
[ "$out" = "xfer-info (xfer) $version" ] || fail "--version says '$out', want 'xfer-info (xfer) $version'"

"$xi" --no-such-option >/dev/null 2>"$tmp/err"
rc=$?
[ $rc = 2 ] || fail "a bad option exits $rc, want 2"
grep -q usage "$tmp/err" || fail "a bad option: no usage on stderr"

"$xi" --provider no-such-provider >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 1 ] || fail "a missing provider exits $rc, want 1"
grep -q "no-such-provider" "$tmp/err" || fail "a missing provider is not named on stderr"
grep -q "^topology:" "$tmp/out" || fail "the report is not printed when the provider is missing"

"$xi" --provider tcp --nics no-such-nic0 >/dev/null 2>&1
rc=$?
[ $rc = 1 ] || fail "a missing NIC exits $rc, want 1"

# --json: valid, and the selected engine follows the environment.
check_json() { # WANT_CHOSEN WANT_DOMAIN(or -) [env...]
	want=$1 dom=$2
	shift 2
	env "$@" "$xi" --json >"$tmp/json" 2>"$tmp/err" || {
		fail "$* --json exits non-zero: $(cat "$tmp/err")"
		return
	}
	"$py" - "$tmp/json" "$want" "$dom" "$version" <<'PY' || fail "$* --json: see above"
import json, sys
path, want, dom, version = sys.argv[1:]
d = json.load(open(path))
s = d["selected"]
assert d["version"] == version, d["version"]
assert s["ok"] and s["chosen"] == want, s
assert dom == "-" or s["nic"][0]["domain"] == dom, s["nic"]
assert {p["provider"] for p in d["providers"]} == {"efa", "verbs", "tcp", "shm", "ofi-shm"}, d["providers"]
assert "devices" in d["topology"] and "submit_depth" in d["config"]
print("xfer_info_cli: %s -> %s on %s" % (s["provider"], s["chosen"], s["nic"][0]["domain"]))
PY
}
check_json "tcp;ofi_rxm" lo XFER_PROVIDER=tcp XFER_NICS=lo
check_json shm - XFER_PROVIDER=shm
# Without XFER_NICS the engine takes the provider's first NIC, which is what
# fi_info lists first for the same provider (eth0 before lo, typically).
if command -v fi_info >/dev/null 2>&1; then
	first=$(fi_info -p "tcp;ofi_rxm" -t FI_EP_RDM 2>/dev/null | sed -n 's/^ *domain: *//p' | head -1)
	[ -n "$first" ] && check_json "tcp;ofi_rxm" "$first" XFER_PROVIDER=tcp
fi

[ $bad = 0 ] && echo "xfer_info_cli: PASS"
exit $bad
