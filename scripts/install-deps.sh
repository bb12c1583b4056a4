#!/usr/bin/env bash
# Installs, with apt, what a fresh Debian 12 machine lacks to build and test
# xfer. Run it as root (it calls apt-get); with everything present it
# installs nothing and needs no root.
#
#   scripts/install-deps.sh            build, test, install, wheel
#   scripts/install-deps.sh --bench    also the benchmarks' optional baselines
#                                      and plotting (ucx-utils, python3-matplotlib)
#
# Python packages are never installed here, and never into the system
# Python: `make test` puts pytest, numpy and torch into a virtual
# environment of its own (build/venv; see the Makefile).
set -euo pipefail
# libibverbs-dev: the headers of the raw RDMA backend (libxfer loads libibverbs
# at run time and works without it). make test-rdma's VM installs its own
# packages (shared/tools/rxe-vm/build.sh).
pkgs=(build-essential cmake pkg-config clang libfabric-dev libfabric-bin libhwloc-dev iproute2
	python3 python3-venv ca-certificates groff-base
	libibverbs-dev)
case "${1:-}" in
--bench) pkgs+=(ucx-utils python3-matplotlib) ;;
"") ;;
*)
	echo "usage: $0 [--bench]" >&2
	exit 2
	;;
esac
missing=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "install-deps.sh: missing ${missing[*]}; run as root (sudo $0 $*), or" \
		"apt-get install ${missing[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}"
