#!/usr/bin/env bash
# Per-group activation statistics of the real models on every genre's
# profile split: for a few thresholds on |value| the mean share of entries
# active per token, and at density 0.3 the share of entries active in more
# than half the tokens (how concentrated activity is), per group averaged
# over layers. For tuning placement and selective loading on real numbers.
# Usage: SF_BIN=... SF_SHARED=... tests/bench/actstats.sh  (TOKENS)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
shared=${SF_SHARED:-$root/../shared}
tokens=${TOKENS:-16384}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# mean over layers of a per-slot field, per group
per_group() {
	jq -r --arg f "$1" '[.slots[] | {group, v: .[$f]}] | group_by(.group)
		| map("\(.[0].group)=\((map(.v) | add / length * 1000 | round / 1000))") | join(" ")' "$2"
}

for model in mix4-1m mix4-5m; do
	for genre in kjv fortunes gcide man; do
		corpus=$shared/data/mix4/$genre.profile.txt
		echo "== $model $genre"
		for spec in "--threshold 0.05" "--threshold 0.1" "--threshold 0.25" "--threshold 0.5" "--density 0.3"; do
			# shellcheck disable=SC2086
			"$bin/sf-profile" -q -m "$shared/models/$model" $spec --max-tokens "$tokens" "$corpus" |
				"$bin/sf-coact" -q -o "$work/c.sfc"
			"$bin/sf-coact" -q --info "$work/c.sfc" >"$work/i.json"
			if [ "$spec" = "--density 0.3" ]; then
				echo "  density 0.3: active in > half the tokens: $(per_group over_half "$work/i.json")"
			else
				echo "  ${spec#--} mean density: $(per_group mean_density "$work/i.json")"
			fi
		done
	done
done
