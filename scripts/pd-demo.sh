#!/usr/bin/env bash
# Prefill/decode disaggregation demo (make pd-demo): a prefiller and a decoder
# as separate processes. As root with iproute2 they run in two network
# namespaces joined by a veth pair (two hosts, for the network stack); else
# over loopback. Extra arguments go to both processes (e.g. --tokens 300,4000).
#
#   scripts/pd-demo.sh [BUILD_DIR] [pd-demo options]
set -euo pipefail
build=${1:-build}
shift || true
bin="$build/bin/pd-demo"
if [[ ! -x $bin ]]; then
	echo "pd-demo.sh: $bin not found; build first (make)" >&2
	exit 1
fi

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null 2>&1; then
	echo "pd-demo.sh: not root (or no iproute2): both processes on loopback"
	exec "$bin" local "$@"
fi

ns_p="pdP$$" ns_d="pdD$$" if_p="pdp$$" if_d="pdd$$"
net=10.233.$(($$ % 200)).
cleanup() {
	ip netns del "$ns_p" 2>/dev/null || true
	ip netns del "$ns_d" 2>/dev/null || true
}
trap cleanup EXIT
if ! ip netns add "$ns_p" 2>/dev/null || ! ip netns add "$ns_d" 2>/dev/null; then
	echo "pd-demo.sh: cannot create network namespaces here: loopback instead"
	cleanup
	exec "$bin" local "$@"
fi
ip link add "$if_p" netns "$ns_p" type veth peer name "$if_d" netns "$ns_d"
for side in "p $ns_p $if_p 1" "d $ns_d $if_d 2"; do
	read -r _ ns ifc host <<<"$side"
	ip -n "$ns" link set lo up
	ip -n "$ns" addr add "${net}${host}/24" dev "$ifc"
	ip -n "$ns" link set "$ifc" up
done
# Providers list only interfaces that are up and running.
for _ in $(seq 100); do
	ip -n "$ns_d" -o link show dev "$if_d" | grep -q 'state UP' && break
	sleep 0.05
done
port=$((20000 + $$ % 20000))
echo "pd-demo.sh: prefiller in namespace $ns_p (${net}1 on $if_p), decoder in $ns_d (${net}2 on $if_d)"
ip netns exec "$ns_p" "$bin" prefill --listen "${net}1:$port" --provider tcp --nics "$if_p" "$@" &
pf=$!
rc=0
ip netns exec "$ns_d" "$bin" decode --connect "${net}1:$port" --provider tcp --nics "$if_d" "$@" || rc=$?
wait "$pf" || rc=$?
if [[ $rc -eq 0 ]]; then
	echo "pd-demo.sh: OK"
else
	echo "pd-demo.sh: FAILED ($rc)"
fi
exit $rc
