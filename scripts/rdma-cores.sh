#!/bin/sh
# Core dumps of the verbs;ofi_rxm crash (docs/design.md §16.4), to see where
# and on what it dies. Two modes:
#   scripts/rdma-cores.sh BUILD OUT N "CASE two:CASE ..."   (inside the rxe VM, --rxe 4,
#       OUT in a --share folder): runs each fault case N rounds on verbs, one
#       NIC (two:CASE on two), and keeps every core as OUT/core.PID.faults
#   scripts/rdma-cores.sh --show BUILD CORE                 (on the host, BUILD
#       holding the very binary that dumped CORE):
#       the crashed thread's frames, libfabric's as offsets into the library
#       (it is stripped; offsets are what docs/design.md names), and the
#       first bytes of the receive buffer rxm was reposting (rxm's header:
#       version, control type; xfer's magic 64 bytes in)
# libfabric links libinfinipath, whose constructor installs a SIGSEGV handler
# that prints a backtrace and exits: no core. A preloaded shim (built here
# into OUT) refuses handlers for SIGSEGV, SIGBUS and SIGABRT, so the default
# action dumps core.
set -e
if [ "$1" = --show ]; then
	BUILD=$2 CORE=$3
	t=$(mktemp)
	gdb -batch -ex "info sharedlibrary libfabric" -ex bt -ex "info registers r9" \
		"$BUILD/bin/faults" "$CORE" 2>/dev/null > "$t"
	text=$(grep '^0x.*libfabric.so' "$t" | awk '{print $1}')
	lib=$(grep '^0x.*libfabric.so' "$t" | awk '{print $NF}')
	# The library's load address: where gdb says its .text starts, less the
	# section's offset in the file.
	off=$(readelf -SW "$lib" | awk '{for (i = 1; i < NF; i++) if ($i == ".text") print $(i + 2)}')
	grep '^#' "$t" | uniq | while read -r n addr rest; do
		case $rest in
		*libfabric*) printf '%s libfabric+0x%x\n' "$n" $((addr - text + 0x$off)) ;;
		*) echo "$n $addr $rest" | cut -c1-160 ;;
		esac
	done
	# r9 holds the rx buffer in rxm_post_recv (+0xb7882); its packet is at +0xe8.
	r9=$(awk '$1 == "r9" {print $2}' "$t")
	gdb -batch -ex "x/2gx $r9+0xe8" -ex "x/1wx $r9+0xe8+0x40" "$BUILD/bin/faults" "$CORE" 2>/dev/null | grep '^0x'
	rm -f "$t"
	exit 0
fi
BUILD=${1:-build}
OUT=${2:?OUT folder}
N=${3:-10}
CASES=${4:-forged_bounce_key two:forged_key stop_in_flight}
mkdir -p "$OUT"
cat > "$OUT/nosegv.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
typedef int (*sa_fn)(int, const struct sigaction *, struct sigaction *);
static int fatal(int sig) { return sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT; }
int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	static sa_fn real;
	if (!real)
		real = (sa_fn)dlsym(RTLD_NEXT, "sigaction");
	return real(sig, fatal(sig) ? NULL : act, old);
}
sighandler_t signal(int sig, sighandler_t h)
{
	struct sigaction a = {.sa_handler = h}, o;
	if (fatal(sig))
		return SIG_DFL;
	sigemptyset(&a.sa_mask);
	a.sa_flags = SA_RESTART;
	return sigaction(sig, &a, &o) ? SIG_ERR : o.sa_handler;
}
EOF
cc -shared -fPIC -O2 -o "$OUT/nosegv.so" "$OUT/nosegv.c" -ldl
echo "$OUT/core.%p.%e" > /proc/sys/kernel/core_pattern
ulimit -c unlimited
sh "$(dirname "$0")/rdma-neigh.sh"
export XFER_TEST_TIME_SCALE=${XFER_TEST_TIME_SCALE:-4} XFER_TEST_PROVIDER=verbs
r=0
while [ $r -lt "$N" ]; do
	r=$((r + 1))
	for c in $CASES; do
		nics=rxe0 child=rxe1
		case $c in two:*) c=${c#two:} nics=rxe0,rxe2 child=rxe1,rxe3 ;; esac
		rc=0
		XFER_NICS=$nics XFER_NICS_CHILD=$child LD_PRELOAD="$OUT/nosegv.so" \
			timeout -k 5 300 "$BUILD/bin/faults" "$c" > "$OUT/run-$r-$c-$nics.log" 2>&1 || rc=$?
		echo "round $r $c [$nics] rc=$rc cores=$(ls "$OUT" | grep -c '^core\.')"
	done
done
