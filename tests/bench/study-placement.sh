#!/usr/bin/env bash
# Study 2, placement (Neuralink Figures 11 and 12): identity (LLMFlash),
# frequency (Neuralink-S) and coact (Neuralink). (a) Offline, sf-place
# --eval on a trace of the test splits (profiled at the placement's
# density): runs per token, read length distribution. (b) From flash
# (O_DIRECT, no cache), at the calibrated budgets study 1 found for +10% and
# +20% (trellis tiers): requests per token, read lengths, bytes moved over
# needed, effective bandwidth and latency, collapse 0 and auto. Writes
# eval.json, flash.jsonl, placement.csv, placement.png. docs/RESULTS.md.
#   tests/bench/study-placement.sh   [QUICK=1] [BUDGETS="0.3 0.5"] [N] [REPEATS]
. "$(dirname "$0")/study-lib.bash"

artifacts
probe_device
method=$(image_method)
if [ -z "${BUDGETS:-}" ]; then
	BUDGETS="$(at_pct "spax-$method" 10) $(at_pct "spax-$method" 20)"
	BUDGETS=$(echo "$BUDGETS" | tr ' ' '\n' | sort -u -g | tr '\n' ' ')
fi
log "budgets $BUDGETS ($method tiers)"

# (a) offline: profile the test splits at the density of the placements
density=$(jq -r '.selection.density' "$art/scores.json")
tt=$([ -n "$QUICK" ] && echo 100 || echo 4000)
tests=()
for g in $GENRES; do tests+=("$data/$g.test.txt"); done
sf-profile -q --model "$model" --density "$density" --max-tokens "$tt" -t 2 "${tests[@]}" -o "$out/test.sft"
sf-place --eval "$out/test.sft" --model "$model" --json \
	"$art/place-identity.json" "$art/place-frequency.json" "$art/place-coact.json" |
	jq '{density: '"$density"', placements: [.placements[] |
		{placement: (.placement | split("/") | last | ltrimstr("place-") | rtrimstr(".json")),
		 runs_per_token: ([.groups[].runs_per_token] | add),
		 active_per_token: ([.groups[].active_per_token] | add),
		 histogram: (reduce .groups[].read_length_histogram as $h ({};
			reduce ($h | to_entries[]) as $e (.; .[$e.key] += $e.value)))} |
		.mean_read_length = (.active_per_token / .runs_per_token)]}' > "$out/eval.json"
rm -f "$out/test.sft"

# (b) from flash
: > "$out/flash.jsonl"
for b in $BUDGETS; do
	for p in identity frequency coact; do
		for c in 0 auto; do
			bench "$p" --budget "$b" --collapse "$c" --cache-policy none "$art/$p-$method.sfimg" |
				jq -c --argjson b "$b" --arg c "$c" '. + {target_budget: $b, collapse_gap: $c}' >> "$out/flash.jsonl"
		done
	done
done

{
	echo "budget,placement,collapse,req_per_token,read_length,moved_over_needed,eff_MB_s,p50_ms,speedup_vs_identity0"
	jq -r -s 'group_by(.target_budget)[] | (map(select(.name == "identity" and .collapse_gap == "0"))[0].p50_ms) as $base |
		.[] | [.target_budget, .name, .collapse_gap, (.requests_per_token | round),
		(.mean_read_length * 100 | round / 100), (.moved_over_needed * 100 | round / 100),
		(.effective_mb_s | round), (.p50_ms * 1000 | round / 1000), ($base / .p50_ms * 100 | round / 100)] |
		map(tostring) | join(",")' "$out/flash.jsonl"
} > "$out/placement.csv"

# plot data: offline read length histograms, flash requests per token
jq -r '.placements as $p | ($p[0].histogram | keys_unsorted) as $k |
	($k | sort_by(split("-")[0] | rtrimstr("+") | tonumber))[] as $b |
	"\($b) " + ([$p[] | .histogram[$b] / (.histogram | add)] | map(tostring) | join(" "))' \
	"$out/eval.json" > "$out/histogram.dat"
jq -r '.placements[] | "\(.placement) \(.runs_per_token) \(.mean_read_length)"' "$out/eval.json" > "$out/offline.dat"
# per budget and collapse: requests per token and p50 of identity, frequency, coact
jq -r -s 'group_by([.target_budget, .collapse_gap])[] |
	"b\(.[0].target_budget)/c\(.[0].collapse_gap) " + ([.[] | .requests_per_token] | map(tostring) | join(" ")) +
	" " + ([.[] | .p50_ms] | map(tostring) | join(" "))' "$out/flash.jsonl" > "$out/flash.dat"
plot placement

echo "offline (sf-place --eval, test splits, density $density):"
jq -r '.placements[] | "  \(.placement): \(.runs_per_token | round) runs/token, mean read length \(.mean_read_length * 100 | round / 100)"' "$out/eval.json"
echo "from flash (O_DIRECT, no cache, medians of $REPEATS runs of $N tokens):"
table "$out/placement.csv"
