#!/bin/sh
# Middle-tier figures for the closing note of issue 5: MSE on 1,000 i.i.d.
# N(0,1) columns (trellis at lengths 4096 and 256, scalar), trellis encode
# throughput at -t 1 and -t 2, decode-accumulate against bf16 colaccum,
# and sf-encode's relative error and speed on mix4-5m's real columns.
# Environment as `make bench` sets it: SF_BIN, SF_BENCH, SF_SHARED.
set -eu
: "${SF_BIN:?}" "${SF_BENCH:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$SF_BENCH/codes" mse 1000 2
# 256 columns of 1024: 16 lockstep batches, steadier than the default 64
"$SF_BENCH/codes" encode 1 256
"$SF_BENCH/codes" encode 2 256
"$SF_BENCH/codes" decode

model=${SF_SHARED:-../shared}/models/mix4-5m
if [ -d "$model" ]; then
	# weights of every q, k, v, o, gate, up, down
	weights=$(jq '(.hidden_size / .num_attention_heads) as $hd |
		.num_hidden_layers * (.hidden_size * $hd * (2 * .num_attention_heads +
		2 * .num_key_value_heads) + 3 * .hidden_size * .intermediate_size)' "$model/config.json")
	for t in 1 2; do
		start=$(date +%s.%N)
		"$SF_BIN/sf-encode" --model "$model" -t "$t" --stats "$tmp/stats.json" -o "$tmp/codes.sfq"
		end=$(date +%s.%N)
		jq -c --arg t "$t" --arg s "$(echo "$end - $start" | bc)" --arg w "$weights" \
			'{bench: "sf-encode mix4-5m", threads: ($t | tonumber), seconds: ($s | tonumber),
			  weights_per_s: (($w | tonumber) / ($s | tonumber) | floor),
			  relative: ([.[] | .relative] | add / length),
			  worst: ([.[] | .relative] | max)}' "$tmp/stats.json"
	done
	"$SF_BIN/sf-encode" --model "$model" --method scalar --stats "$tmp/s.json" -o "$tmp/s.sfq"
	jq -c '{bench: "sf-encode mix4-5m scalar", relative: ([.[] | .relative] | add / length)}' "$tmp/s.json"
else
	echo "encode.sh: $model absent: real-column figures skipped" >&2
fi
