#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test xfer.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libfabric-dev libfabric-bin libhwloc-dev iproute2)
missing=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${missing[@]}"
fi
