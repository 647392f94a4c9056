#!/usr/bin/env bash
# Time to first token from an image (issue 17): a prompt of TOKENS tokens
# (default 512) through sf-run IMAGE in passes of -b tokens against
# today's one-token prefill (-b 1), on a random model of TinyLlama's
# widths (hidden 2048, intermediate 5632, 4 layers, 32/4 heads, vocab
# 32,000, untied, BF16; tests/fixtures/mkmodel, scalar codes) packed in a
# scratch directory. Settings: budget 1, TEAL density 0.3 and the two
# tiers at --k-top 0.2 --k-mid 0.3 (Equation 5 about 0.3; a random model
# has no calibration worth running). In one run, interleaved, medians of
# REPEATS, -t THREADS (default 2):
#   - the device: fio O_DIRECT sequential 256 KiB reads of the image at
#     depth 32, and random ones (the decoder's requests are of that size);
#   - sf-run --bench (its pp is the prompt's tokens per second; time to
#     first token = tokens / pp), with -b 1 run on the first ONE_TOKENS
#     tokens (default 128) only: each of its passes reads every selected
#     column again, so its time grows linearly and is scaled to TOKENS
#     (the printed row says so).
# The image's reads are O_DIRECT: the page cache holds nothing of the
# flash regions between runs.
#   tests/bench/prefill-image.sh [SCRATCH=/var/tmp/sf-prefill] [REPEATS=3]
#                                [BATCHES="64 256"] [TOKENS=512] [KEEP=1]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
fixtures=${SF_FIXTURES:-$root/build/opt/fixtures}
scratch=${SCRATCH:-/var/tmp/sf-prefill}
REPEATS=${REPEATS:-3}
TOKENS=${TOKENS:-512}
ONE_TOKENS=${ONE_TOKENS:-128}
BATCHES=${BATCHES:-64 256}
THREADS=${THREADS:-2}
export PATH=$bin:$PATH
log() { echo "prefill-image: $*" >&2; }
. "$root/tests/bench/flash-lib.bash"
command -v fio >/dev/null || { log "fio is not installed (apt-get install fio)"; exit 1; }
mkdir -p "$scratch"

img=$scratch/m2048.sfimg
if ! [ -f "$img" ]; then
	log "making the model in $scratch"
	"$fixtures/mkmodel" -o "$scratch/model" --hidden 2048 --intermediate 5632 --layers 4 \
		--heads 32 --kv-heads 4 --vocab 32000 --no-tie --max-pos 2048 \
		--tokenizer "$root/models/mix4-1m" >/dev/null
	sf-encode --model "$scratch/model" --method scalar -t 2 -q -o "$scratch/codes.sfq"
	sf-pack --model "$scratch/model" --codes "$scratch/codes.sfq" -q -o "$img"
	rm -rf "$scratch/model" "$scratch/codes.sfq"
fi
[ -n "${KEEP:-}" ] || trap 'rm -f "$img"' EXIT

full=$(prompt_of "$TOKENS" "$scratch")
short=$(prompt_of "$ONE_TOKENS" "$scratch")
device() { device_gbs "$1" 256k 32; }

configs=("budget1|--budget 1" "density0.3|--density 0.3" "tiers0.2+0.3|--k-top 0.2 --k-mid 0.3")
res=$scratch/results.txt
: > "$res"
for r in $(seq "$REPEATS"); do
	echo "device seq $(device read)" >> "$res"
	echo "device rand $(device randread)" >> "$res"
	for c in "${configs[@]}"; do
		name=${c%%|*}
		read -r -a opts <<< "${c#*|}"
		for b in 1 $BATCHES; do
			p=$full
			[ "$b" = 1 ] && p=$short
			j=$(sf-run "$img" "${opts[@]}" -p "$(cat "$p")" -n 1 --temp 0 --bench -b "$b" \
				-t "$THREADS")
			n=$(jq .prompt_tokens <<< "$j")
			pp=$(jq .pp <<< "$j")
			bpt=$(jq .bytes_moved_per_token <<< "$j")
			echo "run $name $b $n $pp $bpt" >> "$res"
			log "repeat $r: $name -b $b: $n tokens, $pp tok/s"
		done
	done
done

echo "device: O_DIRECT 256 KiB at depth 32: sequential $(grep '^device seq' "$res" |
	awk '{print $3}' | median) GB/s, random $(grep '^device rand' "$res" |
	awk '{print $3}' | median) GB/s (medians of $REPEATS)"
printf '%-14s %5s %8s %10s %10s %12s %8s\n' setting -b tokens prompt_tps ttft_s bytes_per_tok speedup
for c in "${configs[@]}"; do
	name=${c%%|*}
	one=$(awk -v s="$name" '$1 == "run" && $2 == s && $3 == 1 { print $5 }' "$res" | median)
	one_ttft=$(echo "$TOKENS / $one" | bc -l)
	for b in 1 $BATCHES; do
		pp=$(awk -v s="$name" -v b="$b" '$1 == "run" && $2 == s && $3 == b { print $5 }' "$res" | median)
		n=$(awk -v s="$name" -v b="$b" '$1 == "run" && $2 == s && $3 == b { print $4 }' "$res" | head -1)
		bpt=$(awk -v s="$name" -v b="$b" '$1 == "run" && $2 == s && $3 == b { print $6 }' "$res" | median)
		ttft=$(echo "$TOKENS / $pp" | bc -l)
		note=""
		[ "$b" = 1 ] && note=" (run on $n tokens, scaled)"
		printf '%-14s %5s %8s %10.1f %10.2f %12.0f %7.1fx%s\n' "$name" "$b" "$TOKENS" "$pp" \
			"$ttft" "$bpt" "$(echo "$one_ttft / $ttft" | bc -l)" "$note"
	done
done
