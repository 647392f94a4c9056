#!/usr/bin/env bash
# Prompt processing against decoding (issue 17): tokens/s of the batched
# forward pass (sf_forward_batch, BATCH tokens a pass) and of one-token
# decoding, at -t 1 and -t 2, on mix4-5m and on a random model of
# TinyLlama's widths (hidden 2048, intermediate 5632, 4 layers, 32 heads
# over 4 KV heads, vocab 32,000, BF16), beside this machine's f32 FMA peak
# and memory read bandwidth measured in the same run (decoding streams the
# weights, so its rate is read against the bandwidth). Targets: prompt >= 8x decode on the 2048 shape
# at -t 2, and >= 60% of the FMA peak. Medians of RUNS runs.
# Usage: make bench BENCH=tests/bench/prefill.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
benchbin=${SF_BENCH:-$root/build/opt/bench}
fixtures=${SF_FIXTURES:-$root/build/opt/fixtures}
shared=${SF_SHARED:-$root/../shared}
runs=${RUNS:-3}
tokens=${TOKENS:-256}
batch=${BATCH:-64}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$fixtures/mkmodel" -o "$work/m2048" --hidden 2048 --intermediate 5632 --layers 4 \
	--heads 32 --kv-heads 4 --vocab 32000 --no-tie --max-pos 2048 >/dev/null

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '%-10s %2s %10s %10s %7s %9s %8s %9s\n' model t decode_tps prompt_tps ratio gflops of_peak decode_GBps
for t in 1 2; do
	peak=$(for i in $(seq "$runs"); do "$benchbin/batch" --fma "$t" | jq .fma_gflops; done | median)
	bw=$("$benchbin/membw" --threads "$t" | jq .read_gbps)
	for model in "$shared/models/mix4-5m" "$work/m2048"; do
		[ -d "$model" ] || { echo "$model absent: skipped"; continue; }
		for i in $(seq "$runs"); do
			"$benchbin/batch" "$model" "$t" "$tokens" "$batch"
		done > "$work/runs.json"
		d=$(jq .decode_tps "$work/runs.json" | median)
		p=$(jq .prompt_tps "$work/runs.json" | median)
		g=$(jq .prompt_gflops "$work/runs.json" | median)
		# bytes a decode step streams: a multiply-add per weight, 2 bytes each (BF16)
		gb=$(jq -s '.[0].flops_per_token' "$work/runs.json")
		printf '%-10s %2s %10.1f %10.1f %7.1f %9.1f %7.0f%% %9.1f\n' "$(basename "$model")" "$t" \
			"$d" "$p" "$(echo "$p / $d" | bc -l)" "$g" "$(echo "100 * $g / $peak" | bc -l)" \
			"$(echo "$d * $gb / 1000000000" | bc -l)"
	done
	echo "f32 FMA peak at -t $t: $peak GFLOP/s; memory read bandwidth: $bw GB/s"
done
