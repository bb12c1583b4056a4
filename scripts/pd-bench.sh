#!/usr/bin/env bash
# Prefill/decode KV-transfer benchmark (docs/kv.md): per-layer compute against
# per-layer transfer, and the TTFT cost of disaggregation, for several prompt
# lengths. As root with iproute2: the prefill and decode processes run in two
# network namespaces joined by a veth pair, once per link rate (tc tbf on both
# ends; "none" = unshaped); otherwise once over loopback.
#
#   scripts/pd-bench.sh [BUILD_DIR] [--rates "none 1gbit 100mbit"] [pd-bench options]
set -euo pipefail
build=build
if [[ $# -gt 0 && $1 != --* ]]; then
	build=$1
	shift
fi
rates="none 1gbit 200mbit 50mbit"
if [[ ${1:-} == --rates ]]; then
	rates=$2
	shift 2
fi
bin="$build/bin/pd-bench"
if [[ ! -x $bin ]]; then
	echo "pd-bench.sh: $bin not found; build first (make)" >&2
	exit 1
fi
echo "# $(date -u +%FT%TZ) $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null 2>&1; then
	echo "# not root (or no iproute2): loopback only"
	echo "+ $bin local --label loopback $*"
	exec "$bin" local --label loopback "$@"
fi

ns_p="pbP$$" ns_d="pbD$$" if_p="pbp$$" if_d="pbd$$"
net=10.234.$(($$ % 200)).
cleanup() {
	ip netns del "$ns_p" 2>/dev/null || true
	ip netns del "$ns_d" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns_p"
ip netns add "$ns_d"
ip link add "$if_p" netns "$ns_p" type veth peer name "$if_d" netns "$ns_d"
for side in "$ns_p $if_p 1" "$ns_d $if_d 2"; do
	read -r ns ifc host <<<"$side"
	ip -n "$ns" link set lo up
	ip -n "$ns" addr add "${net}${host}/24" dev "$ifc"
	ip -n "$ns" link set "$ifc" up
done
for _ in $(seq 100); do
	ip -n "$ns_d" -o link show dev "$if_d" | grep -q 'state UP' && break
	sleep 0.05
done

rc=0
for rate in $rates; do
	for side in "$ns_p $if_p" "$ns_d $if_d"; do
		read -r ns ifc <<<"$side"
		ip netns exec "$ns" tc qdisc del dev "$ifc" root 2>/dev/null || true
		if [[ $rate != none ]]; then
			# As tests/netns.c caps its links: a token bucket on each end.
			ip netns exec "$ns" tc qdisc add dev "$ifc" root tbf rate "$rate" burst 256kb latency 50ms
		fi
	done
	port=$((20000 + ($$ + RANDOM) % 20000))
	label="veth between namespaces, link ${rate/none/unshaped}"
	echo
	echo "+ ip netns exec $ns_p $bin prefill --listen ${net}1:$port --provider tcp --nics $if_p $*"
	echo "+ ip netns exec $ns_d $bin decode --connect ${net}1:$port --provider tcp --nics $if_d --label '$label' $*"
	ip netns exec "$ns_p" "$bin" prefill --listen "${net}1:$port" --provider tcp --nics "$if_p" "$@" &
	pf=$!
	ip netns exec "$ns_d" "$bin" decode --connect "${net}1:$port" --provider tcp --nics "$if_d" \
		--label "$label" "$@" || rc=$?
	wait "$pf" || rc=$?
done
exit $rc
