#!/usr/bin/env bash
# sf-place benchmarks. (1) Search time and peak memory of the scalable
# co-activation greedy at n = 8,192, 16,384 and 32,768 on synthetic
# statistics (tests/bench/placebench.c), -t 2; the exact greedy at 8,192
# for comparison. Target: <= 10 s and 8 GB at 32,768.
# (2) On mix4-5m: profile on the profile split, evaluate on the test split,
# density 0.1, 0.3 and 0.5: runs per token and mean read length of
# identity, frequency and coact, every group (needs sf-profile, sf-coact).
# Usage: SF_BIN=... SF_BENCH=... SF_SHARED=... tests/bench/place.sh
# Writes $SF_BENCH_OUT/place.json (default build/bench/place.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
benchbin=${SF_BENCH:-$root/build/opt/bench}
shared=${SF_SHARED:-$root/../shared}
out=${SF_BENCH_OUT:-$root/build/bench}
tokens=${TOKENS:-20000}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== search: synthetic statistics, -t 2" >&2
{
	for n in 8192 16384 32768; do
		"$benchbin/placebench" "$n" 2 16
	done
	"$benchbin/placebench" 8192 2 16 exact
} | tee "$work/search.jsonl" | jq -r '"n \(.n) \(.search): \(.seconds) s, peak RSS \(.peak_rss_bytes / 1048576 | floor) MiB (statistics \(.stats_bytes / 1048576 | floor) MiB, search \(.search_extra_bytes / 1048576 | floor) MiB), runs/token \(.runs_per_token) vs identity \(.identity_runs_per_token)"' >&2

echo "== mix4-5m: profile split -> placements, test split -> --eval" >&2
if ! [ -x "$bin/sf-profile" ] || ! [ -x "$bin/sf-coact" ]; then
	echo "skipped: sf-profile or sf-coact not built" >&2
	jq -s '{search: .}' "$work/search.jsonl" >"$out/place.json"
	exit 0
fi
model=$shared/models/mix4-5m
for d in 0.1 0.3 0.5; do
	"$bin/sf-profile" --model "$model" --density "$d" --max-tokens "$tokens" "$shared"/data/mix4/*.profile.txt |
		"$bin/sf-coact" -o "$work/p$d.sfc"
	"$bin/sf-profile" --model "$model" --density "$d" --max-tokens "$tokens" "$shared"/data/mix4/*.test.txt \
		-o "$work/t$d.sft"
	for m in identity frequency coact; do
		"$bin/sf-place" -q -t 2 --method "$m" "$work/p$d.sfc" -o "$work/$m$d.json"
	done
	"$bin/sf-place" --eval "$work/t$d.sft" --model "$model" --json \
		"$work/identity$d.json" "$work/frequency$d.json" "$work/coact$d.json" |
		jq --arg d "$d" '{density: ($d | tonumber), placements: [.placements[] |
			{placement: (.placement | split("/") | last),
			 runs_per_token: ([.groups[].runs_per_token] | add),
			 mean_read_length: (([.groups[] | .active_per_token] | add) / ([.groups[].runs_per_token] | add)),
			 groups: [.groups[] | {layer, group, runs_per_token, mean_read_length}]}]}'
done | tee "$work/eval.jsonl" | jq -r '"density \(.density): " + ([.placements[] | "\(.placement): \(.runs_per_token | . * 100 | round / 100) runs/token, read length \(.mean_read_length | . * 1000 | round / 1000)"] | join("; "))' >&2
jq -s --slurpfile s "$work/search.jsonl" '{search: $s, mix4_5m: .}' "$work/eval.jsonl" >"$out/place.json"
