#!/usr/bin/env bash
# Tier calibration and profiling, old against new (issue 17): sf-encode
# --calibrate on mix4-5m with the artifacts' options (9 budgets, 256
# tokens, windows of 128, trellis codes) for the layers LAYERS (default
# "0": one layer of six; the whole model's time is about six times it),
# and sf-profile's tokens/s, each by the binaries of revision SF_BASE
# (default 1061a76, a token a pass in both) and of this tree, in turn, at
# -t 1 and -t 2. The outputs must be the same (calib.json but for the
# options its producer records; the trace byte for byte); the script
# stops if not. Environment as `make bench` sets it: SF_BIN, SF_SHARED.
set -euo pipefail
: "${SF_BIN:?}"
base=${SF_BASE:-1061a76}
layers=${LAYERS:-0}
model=${SF_SHARED:-../shared}/models/mix4-5m
data=${SF_SHARED:-../shared}/data/mix4
[ -d "$model" ] || { echo "calibrate.sh: $model absent: skipped" >&2; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

root=$(git rev-parse --show-toplevel)
mkdir "$tmp/base"
git -C "$root" archive "$base" | tar -x -C "$tmp/base"
make -s -C "$tmp/base" -j2 bin/sf-encode bin/sf-profile >/dev/null
old=$tmp/base/bin

"$SF_BIN/sf-encode" -q --model "$model" --method trellis -o "$tmp/codes.sfq"
# CPU seconds (user + system) and wall seconds of a command, as JSON
timed() {
	/usr/bin/time -f '{"cpu_s": %U, "sys_s": %S, "wall_s": %e}' -o "$tmp/time" "$@"
	jq -c '{cpu_s: (.cpu_s + .sys_s), wall_s}' "$tmp/time"
}
for t in 1 2; do
	for side in old new; do
		bin=$SF_BIN
		[ "$side" = old ] && bin=$old
		timed "$bin/sf-encode" -q --model "$model" --calibrate --codes "$tmp/codes.sfq" \
			--corpus "$data/kjv.calib.txt" --budgets 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9 \
			--calib-tokens 256 --window 128 --layers "$layers" -t "$t" \
			-o "$tmp/calib-$side.json" |
			jq -c --arg s "$side" --arg t "$t" --arg l "$layers" \
				'{bench: "calibrate mix4-5m", side: $s, threads: ($t | tonumber), layers: $l} + .'
	done
	cmp <(jq -S 'del(.producer)' "$tmp/calib-old.json") <(jq -S 'del(.producer)' "$tmp/calib-new.json")
	for side in old new; do
		bin=$SF_BIN
		[ "$side" = old ] && bin=$old
		timed "$bin/sf-profile" -q -m "$model" --max-tokens 4000 -t "$t" \
			"$data/kjv.profile.txt" -o "$tmp/trace-$side.sft" |
			jq -c --arg s "$side" --arg t "$t" \
				'{bench: "sf-profile mix4-5m 4000 tokens", side: $s, threads: ($t | tonumber)} + .'
	done
	cmp "$tmp/trace-old.sft" "$tmp/trace-new.sft"
done
