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
# The Python package's tests.
python3 -c 'import pytest, numpy' 2>/dev/null || python3 -m pip install -q pytest numpy
