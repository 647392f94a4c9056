#!/usr/bin/env bash
# Study 3b, the flash side at a real model's shapes: mix4-5m's bundles are
# 0.5-3 KiB, below the 4 KiB page O_DIRECT reads, so its sparse reads move
# 2-3x the bytes they need. Here the same three configurations as issue 7's
# measurement (dense offload; TEAL at the density study 1 found for +10%;
# the two tiers at the k_top and k_mid fractions mix4-5m's calibration gives
# for the +10% budget) run on a random model of Llama-2-7B layer shape
# (tests/fixtures/mkmodel: dim 4096, hidden 11008, 32 heads, vocab 32000,
# LAYERS layers; scalar codes; natural order), from flash with O_DIRECT.
# Random weights: the I/O side only (bytes, requests, latency), not quality.
# Writes flash7b.jsonl, flash7b.csv. docs/RESULTS.md.
#   tests/bench/study-flash7b.sh   [QUICK=1] [LAYERS=2] [N=8] [REPEATS]
. "$(dirname "$0")/study-lib.bash"

artifacts
LAYERS=${LAYERS:-2}
N=${N7:-8}
w=$out/work
mkdir -p "$w"
method=$(image_method)
d10=$(at_pct teal 10)
b10=$(at_pct "spax-$method" 10)
# the calibrated fractions at b10, over every layer and group weighted by entries
read -r kt km < <(jq -r --argjson b "$b10" '(.groups | map_values(.entries)) as $n |
	[.budgets[] | select(.budget == $b) | .layers[].groups | to_entries[] |
	 {e: $n[.key], t: .value.k_top, m: .value.k_mid}] |
	"\((map(.t) | add) / (map(.e) | add)) \((map(.m) | add) / (map(.e) | add))"' "$art/calib-$method.json")
log "TEAL density $d10; tiers at budget $b10: k_top $kt, k_mid $km of every group"

if [ -n "$QUICK" ]; then
	shape=(--hidden 512 --intermediate 1376 --heads 8 --kv-heads 8 --vocab 1024 --max-pos 512)
else
	shape=(--hidden 4096 --intermediate 11008 --heads 32 --kv-heads 32 --vocab 32000 --max-pos 4096)
fi
if ! [ -f "$w/l7b.sfimg" ]; then
	"$fixtures/mkmodel" -o "$w/l7b" "${shape[@]}" --layers "$LAYERS" --tokenizer "$root/models/mix4-1m" >/dev/null
	sf-encode --model "$w/l7b" --method scalar -t 2 -o "$w/codes.sfq"
	sf-pack --model "$w/l7b" --codes "$w/codes.sfq" -o "$w/l7b.sfimg"
	rm -rf "$w/l7b" "$w/codes.sfq"
fi
sf-pack --info "$w/l7b.sfimg" | jq '{sizes, groups: [.groups[] | select(.layer == 0) |
	{group, entries, bundle_bytes: .top_bytes}]}' > "$out/image.json"

: > "$out/flash7b.jsonl"
N=$N bench dense-offload --budget 1 --collapse 0 --cache-policy none "$w/l7b.sfimg" >> "$out/flash7b.jsonl"
N=$N bench "teal-$d10" --density "$d10" --collapse 0 --cache-policy none "$w/l7b.sfimg" >> "$out/flash7b.jsonl"
N=$N bench "tiers-$b10" --k-top "$kt" --k-mid "$km" --collapse 0 --cache-policy none "$w/l7b.sfimg" >> "$out/flash7b.jsonl"
N=$N bench "tiers-$b10-collapse" --k-top "$kt" --k-mid "$km" --cache-policy none "$w/l7b.sfimg" >> "$out/flash7b.jsonl"
{
	echo "config,p50_ms,speedup_vs_offload,budget,MB_moved_per_token,MB_needed_per_token,moved_over_needed,req_per_token,KiB_per_request,io_MB_s"
	jq -r -s '.[0].p50_ms as $off | .[] | [.name, (.p50_ms * 100 | round / 100), ($off / .p50_ms * 100 | round / 100),
		(.budget * 1000 | round / 1000), (.bytes_moved_per_token / 1e6 | round), (.bytes_needed_per_token / 1e6 | round),
		(.moved_over_needed * 100 | round / 100), (.requests_per_token | round), (.bytes_per_request / 1024 | round),
		(.raw_mb_s | round)] | map(tostring) | join(",")' "$out/flash7b.jsonl"
} > "$out/flash7b.csv"
[ -n "${KEEP_IMAGE:-}" ] || rm -f "$w/l7b.sfimg"
echo "Llama-2-7B layer shape, $LAYERS layers, random weights, O_DIRECT; medians of $REPEATS runs of $N tokens"
jq -r '.groups[] | "  \(.group): \(.entries) entries, bundle \(.bundle_bytes / 1024) KiB"' "$out/image.json"
table "$out/flash7b.csv"
