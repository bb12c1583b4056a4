#!/usr/bin/env bash
# Issue 15, what the last full run on the GPU machine left (branch host3):
# scripts/device-host.sh's "left" plan (or PLAN "pp": the ping-pongs alone,
# about 40 s) within 145 s, on the carried build.
#   scripts/device-host3.sh OUT_DIR [left|pp [BUILD]]
exec env XFER_HOST_PLAN="${2:-left}" XFER_HOST_BUDGET_S=${XFER_HOST_BUDGET_S:-145} \
	bash "$(dirname "$0")/device-host.sh" "$1" "${3:-build}"
