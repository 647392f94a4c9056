#!/usr/bin/env bash
# sf-pack benchmarks. (1) Pack time against the bytes written, next to a
# plain sequential write of the same size (dd, fsync) on the same disk:
# target, packing bound by the disk, not the CPU. (2) The image's size
# overhead over the model's weight bytes (alignment, index, codes, header)
# for mix4-5m (with codes) and a random model of Llama-2-7B layer shape
# (tests/fixtures/mkmodel: dim 4096, hidden 11008, 32 heads, vocab 32000,
# LAYERS layers, BF16).
# Usage: SF_BIN=... SF_FIXTURES=... SF_SHARED=... tests/bench/pack.sh
# Writes $SF_BENCH_OUT/pack.json (default build/bench/pack.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
fixtures=${SF_FIXTURES:-$root/build/opt/fixtures}
shared=${SF_SHARED:-$root/../shared}
out=${SF_BENCH_OUT:-$root/build/bench}
layers=${LAYERS:-2}
work=${SF_BENCH_TMP:-$(mktemp -d -p "$root/build")}
mkdir -p "$work"
mkdir -p "$out"
trap 'rm -rf "$work"' EXIT

# weight bytes of a model directory: the safetensors data without headers
weights() {
	local n=0 f hl sz
	for f in "$1"/*.safetensors; do
		hl=$(od -An -tu8 -N8 "$f" | tr -d ' ')
		sz=$(stat -c %s "$f")
		n=$((n + sz - 8 - hl))
	done
	echo "$n"
}

# seconds of a command, wall clock
timed() {
	local t0 t1
	t0=$(date +%s.%N)
	"$@"
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc
}

one() {	# name model-dir extra-options...
	local name=$1 dir=$2
	shift 2
	sync
	local s
	s=$(timed "$bin/sf-pack" --model "$dir" "$@" -o "$work/$name.sfimg")
	local size w
	size=$(stat -c %s "$work/$name.sfimg")
	w=$(weights "$dir")
	local d
	sync
	# the baseline: copying the model's weights file(s), the same kind of
	# bytes (zeros can be cheaper to a thin-provisioned disk), then fsync
	d=$(timed sh -c 'cat "$1"/*.safetensors | dd of="$2" bs=4M iflag=fullblock conv=fsync status=none' _ "$dir" "$work/dd.bin")
	local dsize
	dsize=$(stat -c %s "$work/dd.bin")
	rm -f "$work/dd.bin"
	"$bin/sf-pack" --info "$work/$name.sfimg" |
		jq -c --arg name "$name" --argjson s "$s" --argjson d "$d" --argjson w "$w" --argjson dsize "$dsize" \
			'{name: $name, file_bytes: .sizes.file, weight_bytes: $w, sizes: .sizes,
			  overhead: ((.sizes.file - $w) / $w), overhead_without_codes:
			  ((.sizes.file - .sizes.mid - .sizes.codebook - $w) / $w),
			  pack_seconds: $s, pack_mib_s: (.sizes.file / 1048576 / $s),
			  copy_seconds: $d, copy_mib_s: ($dsize / 1048576 / $d)}'
	rm -f "$work/$name.sfimg"
}

{
	if [ -d "$shared/models/mix4-5m" ]; then
		"$bin/sf-encode" --model "$shared/models/mix4-5m" -o "$work/codes.sfq" 2>/dev/null
		one mix4-5m "$shared/models/mix4-5m"
		one mix4-5m-codes "$shared/models/mix4-5m" --codes "$work/codes.sfq"
		rm -f "$work/codes.sfq"
	fi
	"$fixtures/mkmodel" -o "$work/l7b" --hidden 4096 --intermediate 11008 --heads 32 \
		--kv-heads 32 --vocab 32000 --max-pos 4096 --layers "$layers" \
		--tokenizer "$root/models/mix4-1m" >/dev/null
	one "llama2-7b-shape-${layers}L" "$work/l7b"
	one "llama2-7b-shape-${layers}L-f32" "$work/l7b" --dtype f32
} | tee "$out/pack.jsonl" | jq -r '"\(.name): \(.file_bytes) bytes, overhead \(.overhead * 10000 | round / 100)% (\(.overhead_without_codes * 10000 | round / 100)% without codes), pack \(.pack_seconds) s = \(.pack_mib_s | floor) MiB/s, copy+fsync of the weights \(.copy_mib_s | floor) MiB/s"' >&2
jq -s . "$out/pack.jsonl" > "$out/pack.json"
