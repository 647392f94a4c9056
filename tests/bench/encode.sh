#!/bin/sh
# Middle-tier figures for the closing note of issue 5: MSE on 1,000 i.i.d.
# N(0,1) columns (trellis at lengths 4096 and 256, scalar), trellis encode
# throughput at -t 1 and -t 2, decode-accumulate against bf16 colaccum,
# sf-encode's relative error and speed on mix4-5m's real columns, and
# with SF_BASE=REV the encoder of revision REV against this one.
# Environment as `make bench` sets it: SF_BIN, SF_BENCH, SF_SHARED.
set -eu
: "${SF_BIN:?}" "${SF_BENCH:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$SF_BENCH/codes" mse 1000 2
# 256 columns of 1024: 8 lockstep batches, steadier than the default 64
"$SF_BENCH/codes" encode 1 256
"$SF_BENCH/codes" encode 2 256
"$SF_BENCH/codes" decode

# Old against new in one run: SF_BASE=REV (a revision of this repository,
# e.g. 254adb3^ for the float search) builds REV with this tree's
# tests/bench/codes.c in a scratch copy, then measures the two encoders
# interleaved, SF_REPS (default 5) times each at -t 1 and -t 2, and
# reports the best of each (wall clock and per CPU second: on a shared
# machine the best is the least disturbed) and their ratio, then the MSE of
# both on 1,000 N(0,1) columns of 4096.
if [ -n "${SF_BASE:-}" ]; then
	root=$(git rev-parse --show-toplevel)
	mkdir "$tmp/base"
	git -C "$root" archive "$SF_BASE" | tar -x -C "$tmp/base"
	cp "$root/tests/bench/codes.c" "$tmp/base/tests/bench/codes.c"
	make -s -C "$tmp/base" -j2 build/opt/bench/codes >/dev/null
	old="$tmp/base/build/opt/bench/codes"
	for t in 1 2; do
		for r in $(seq "${SF_REPS:-5}"); do
			"$old" encode "$t" 256 | jq -c '. + {side: "old"}'
			"$SF_BENCH/codes" encode "$t" 256 | jq -c '. + {side: "new"}'
		done >"$tmp/pairs.$t"
		jq -s -c --arg base "$SF_BASE" '
			def best(s; f): [.[] | select(.side == s) | f] | max;
			{bench: "encode old vs new", base: $base, threads: .[0].threads,
			 reps: (length / 2),
			 old_weights_per_s: best("old"; .weights_per_s),
			 new_weights_per_s: best("new"; .weights_per_s),
			 ratio: (best("new"; .weights_per_s) / best("old"; .weights_per_s) * 100 | round / 100),
			 old_weights_per_cpu_s: best("old"; .weights_per_cpu_s),
			 new_weights_per_cpu_s: best("new"; .weights_per_cpu_s),
			 ratio_cpu: (best("new"; .weights_per_cpu_s) / best("old"; .weights_per_cpu_s) * 100 | round / 100)}' \
			"$tmp/pairs.$t"
	done
	"$old" mse 1000 2 | head -1 | jq -c '{bench: "mse old", base: "'"$SF_BASE"'", length, columns, mse}'
	"$SF_BENCH/codes" mse 1000 2 | head -1 | jq -c '{bench: "mse new", length, columns, mse}'
fi

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
