#!/usr/bin/env bash
# Study 4, cache (Neuralink Figure 13): latency per token, bytes moved and
# hit rate against the cache ratio 0 to 0.3 for S3-FIFO without
# linking-aligned admission (--seg-admit 1), with it (0.5, 0.2) and LRU, on
# the coact image at study 1's +10% budget, collapse auto, from flash
# (O_DIRECT). Bytes and hit rates are deterministic; latencies are medians.
# Writes cache.jsonl, cache.csv, summary.json (best_seg_admit, which study
# 3 uses), cache.png. docs/RESULTS.md.
#   tests/bench/study-cache.sh   [QUICK=1] [RATIOS="0.05 0.1 0.2 0.3"] [SEGS="1 0.5 0.2"]
. "$(dirname "$0")/study-lib.bash"

artifacts
probe_device
method=$(image_method)
b=${BUDGET:-$(at_pct "spax-$method" 10)}
ratios=${RATIOS:-0.05 0.1 0.2 0.3}
segs=${SEGS:-1 0.5 0.2}
[ -n "$QUICK" ] && ratios=${RATIOS:-0.1 0.3} && segs=${SEGS:-1 0.2}
img=$art/coact-$method.sfimg
log "budget $b ($method), ratios $ratios"

: > "$out/cache.jsonl"
add() {	# policy seg ratio args...
	local p=$1 s=$2 r=$3
	shift 3
	bench "$p" --budget "$b" "$@" "$img" |
		jq -c --arg p "$p" --argjson s "$s" --argjson r "$r" '. + {policy: $p, seg_admit: $s, ratio: $r}' \
		>> "$out/cache.jsonl"
}
add none 1 0 --cache-policy none
for r in $ratios; do
	for s in $segs; do
		add s3fifo "$s" "$r" --cache-policy s3fifo --seg-admit "$s" --cache-ratio "$r"
	done
	add lru 1 "$r" --cache-policy lru --cache-ratio "$r"
done

# the curves start at ratio 0 (no cache) for every policy
jq -s '(map(select(.policy == "none"))[0]) as $z |
	[map(select(.policy != "none")) | group_by([.policy, .seg_admit])[] |
	 {label: (if .[0].policy == "lru" then "lru" else "s3fifo-admit-\(.[0].seg_admit)" end),
	  policy: .[0].policy, seg_admit: .[0].seg_admit,
	  points: ([$z | .ratio = 0] + sort_by(.ratio))}] as $c |
	{budget: $z.budget, curves: $c,
	 best_seg_admit: ($c | map(select(.policy == "s3fifo")) |
		min_by(.points[1:] | map(.bytes_moved_per_token) | add) | .seg_admit)}' \
	"$out/cache.jsonl" > "$out/summary.json"
{
	echo "policy,ratio,p50_ms,MB_moved_per_token,hit_rate,req_per_token,read_length"
	jq -r '.curves[] | .label as $l | .points[] | [$l, .ratio, (.p50_ms * 1000 | round / 1000),
		(.bytes_moved_per_token / 1e6 * 1000 | round / 1000), (.hit_rate * 1000 | round / 1000),
		(.requests_per_token | round), (.mean_read_length * 100 | round / 100)] | map(tostring) | join(",")' \
		"$out/summary.json"
} > "$out/cache.csv"
jq -r '.curves[] | "# \(.label)", (.points[] | "\(.ratio) \(.p50_ms) \(.bytes_moved_per_token / 1e6) \(.hit_rate)"), "", ""' \
	"$out/summary.json" > "$out/cache.dat"
jq -r '.curves[].label' "$out/summary.json" > "$out/labels.txt"
plot cache

echo "budget $b, coact placement, collapse auto; medians of $REPEATS runs of $N tokens;" \
	"least bytes with seg-admit $(jq .best_seg_admit "$out/summary.json")"
table "$out/cache.csv"
