#!/usr/bin/env bash
# Raw io_uring random reads (lib/common/online/uring.c, O_DIRECT, registered
# buffers) at 4, 16, 64 and 256 KiB with queue depth 1 to 64 over a 1 GiB
# file on the disk, then the sf-run --probe-device figures. The reference
# the sparse decoder's I/O efficiency is measured against (issue 7).
# Expectation on the virtio SSD: about 25k IOPS at 4-16 KiB, 2.3 GB/s at
# 256 KiB and more. Usage: SF_BENCH=... [SIZE=1G SECONDS_PER=1 DIR=/var/tmp]
# tests/bench/uring.sh. Writes $SF_BENCH_OUT/uring.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
benchbin=${SF_BENCH:-$root/build/opt/bench}
out=${SF_BENCH_OUT:-$root/build/bench}
size=${SIZE:-1G}
seconds=${SECONDS_PER:-1}
dir=${DIR:-/var/tmp}
mkdir -p "$out"
file=$(mktemp "$dir/sf-uring-bench.XXXXXX")
trap 'rm -f "$file"' EXIT
rm -f "$file"	# written by the bench, so the size check does the writing

"$benchbin/uring" "$file" "$size" "$seconds" 4K,16K,64K,256K,1M 1,2,4,8,16,32,64 |
	tee "$out/uring.jsonl" |
	jq -r 'if .test == "random" then
		"\(.block / 1024) KiB qd \(.qd): \(.iops) IOPS, \(.gb_per_s) GB/s"
	else
		"probe: \(.small_block / 1024) KiB qd \(.small_qd) \(.iops) IOPS; \(.large_block / 1024) KiB qd \(.large_qd) \(.gb_per_s) GB/s"
	end' >&2
jq -s '{random: [.[] | select(.test == "random")], probe: (.[] | select(.test == "probe"))}' \
	"$out/uring.jsonl" >"$out/uring.json"
