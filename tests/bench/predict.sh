#!/usr/bin/env bash
# The prefetch predictor on real activations: per density (TEAL, one tier)
# and group, the share of the selected entries that the prediction named
# (predict_recall), the share of the predicted entries selected
# (predict_precision), and per page what the prefetch read ahead
# (prefetch_recall, prefetch_overfetch), from sf-run --stats over TOKENS
# test tokens in one-token passes (-b 1, as decoding), --prefetch-predict
# PREDICT (default all: attn_in and ffn_in from the residual stream,
# attn_out and ffn_out from the previous token). Deterministic; no timings.
#   tests/bench/predict.sh [IMAGE] [DENSITIES="0.1 0.3 0.5"] [TOKENS=200]
#       [GENRE=kjv] [PREDICT=all]
# IMAGE defaults to mix4-46m's identity-trellis image of make artifacts
# (build/artifacts/mix4-46m); without one the script says so and skips.
# Writes predict.csv into $SF_BENCH_OUT (default build/bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
shared=${SF_SHARED:-$root/../shared}
out=${SF_BENCH_OUT:-$root/build/bench}
image=${1:-$root/build/artifacts/mix4-46m/identity-trellis.sfimg}
if ! [ -f "$image" ]; then
	echo "skipped: $image absent (make artifacts MODEL=../shared/models/mix4-46m, or give IMAGE)" >&2
	exit 0
fi
mkdir -p "$out"
{
	echo "density,group,predict_recall,predict_precision,prefetch_recall,prefetch_overfetch"
	for d in ${DENSITIES:-0.1 0.3 0.5}; do
		"$bin/sf-run" --density "$d" --prefetch-predict "${PREDICT:-all}" -b 1 -t 1 -q \
			--ppl "$shared/data/mix4/${GENRE:-kjv}.test.txt" --max-tokens "${TOKENS:-200}" \
			--stats - "$image" 2>/dev/null |
			jq -r --arg d "$d" 'select(.groups) | .groups | to_entries[] | [$d, .key,
				(.value | .predict_recall, .predict_precision, .prefetch_recall, .prefetch_overfetch |
				 . * 1000 | round / 1000)] | map(tostring) | join(",")'
	done
} > "$out/predict.csv"
column -s, -t < "$out/predict.csv"
