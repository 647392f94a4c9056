#!/usr/bin/env bash
# Dense decode speed: tokens/s at -t 1 and -t 2 on mix4-5m and on a random
# model of realistic shape (hidden 2048, intermediate 5632, 4 layers, BF16,
# TinyLlama's widths), and for the latter the weight bytes streamed per
# second against this machine's memory read bandwidth measured here too.
# Dense decode is memory-bound: the target is >= 80% of it with -t 2.
# Usage: make bench (or SF_BIN=... SF_BENCH=... SF_FIXTURES=... tests/bench/dense.sh)
# Writes $SF_BENCH_OUT/dense.json (default build/bench/dense.json); prints a table.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
benchbin=${SF_BENCH:-$root/build/opt/bench}
fixtures=${SF_FIXTURES:-$root/build/opt/fixtures}
shared=${SF_SHARED:-$root/../shared}
out=${SF_BENCH_OUT:-$root/build/bench}
runs=${RUNS:-3}
tokens=${TOKENS:-64}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The median of the decode rate over $runs runs.
decode_rate() {
	local model=$1 threads=$2 i
	for i in $(seq "$runs"); do
		"$bin/sf-run" --model "$model" -p "The" -n "$tokens" --ignore-eos --temp 0 \
			-t "$threads" -q --stats "$work/stats.json" >/dev/null
		jq .decode_tokens_per_second "$work/stats.json"
	done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# Weight bytes one decode step reads: every layer matrix and the head.
weight_bytes() {
	jq '(.head_dim // (.hidden_size / .num_attention_heads)) as $hd |
	    (.num_attention_heads * $hd) as $q | (.num_key_value_heads * $hd) as $kv |
	    (.hidden_size * ($q + 2 * $kv) + $q * .hidden_size +
	     3 * .hidden_size * .intermediate_size) * .num_hidden_layers +
	    .vocab_size * .hidden_size | . * 2' "$1/config.json"
}

echo "building the random model (2048 x 5632, 4 layers, BF16)..." >&2
"$fixtures/mkmodel" -o "$work/rand2048" --hidden 2048 --intermediate 5632 --layers 4 \
	--heads 32 --kv-heads 4 --vocab 32000 --dtype bf16 --seed 1 --tokenizer "$root/models/mix4-1m"

membw1=$("$benchbin/membw" --threads 1 | jq .read_gbps)
membw2=$("$benchbin/membw" --threads 2 | jq .read_gbps)

models=("$work/rand2048")
names=("random-2048x5632x4")
if [ -d "$shared/models/mix4-5m" ]; then
	models=("$shared/models/mix4-5m" "${models[@]}")
	names=("mix4-5m" "${names[@]}")
else
	echo "../shared absent: mix4-5m not measured" >&2
fi

json="[]"
for i in "${!models[@]}"; do
	m=${models[$i]}
	bytes=$(weight_bytes "$m")
	for t in 1 2; do
		rate=$(decode_rate "$m" "$t")
		membw=$([ "$t" = 1 ] && echo "$membw1" || echo "$membw2")
		json=$(jq --arg model "${names[$i]}" --argjson t "$t" --argjson rate "$rate" \
			--argjson bytes "$bytes" --argjson membw "$membw" \
			'. + [{model: $model, threads: $t, decode_tokens_per_second: $rate,
			       weight_bytes_per_token: $bytes,
			       weight_gbps: ($rate * $bytes / 1e9), memory_read_gbps: $membw,
			       fraction_of_memory_bandwidth: ($rate * $bytes / 1e9 / $membw)}]' <<<"$json")
	done
done
jq --arg date "$(date -u +%FT%TZ)" --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" \
	'{date: $date, cpu: $cpu, results: .}' <<<"$json" > "$out/dense.json"

printf '%-22s %7s %10s %10s %10s %8s\n' model threads tok/s weightGB/s memGB/s share
jq -r '.results[] | [.model, .threads, (.decode_tokens_per_second * 10 | round / 10),
	(.weight_gbps * 100 | round / 100), (.memory_read_gbps * 100 | round / 100),
	((.fraction_of_memory_bandwidth * 100 | round | tostring) + "%")] | @tsv' "$out/dense.json" |
	while IFS=$'\t' read -r a b c d e f; do printf '%-22s %7s %10s %10s %10s %8s\n' "$a" "$b" "$c" "$d" "$e" "$f"; done
