#!/usr/bin/env bash
# Sparse decoder benchmark on mix4-5m (O_DIRECT, not part of make check):
# latency per token and bytes moved for dense offload (budget 1, no cache),
# TEAL at the density giving about +10% perplexity, and the calibrated
# tiers at about +10%; then identity, frequency and coact placements at
# that budget with collapse off and auto. Medians of REPEATS runs; compare
# ratios within one run (the machine is shared). man/sf-run.1.
#
#   tests/bench/sparse.sh            (SF_BIN, SF_SHARED, WORK, N, REPEATS, PPL_TOKENS)
set -euo pipefail

BIN=${SF_BIN:-bin}
SHARED=${SF_SHARED:-../shared}
WORK=${WORK:-build/bench-sparse}
N=${N:-64}			# tokens generated per latency run
REPEATS=${REPEATS:-3}
PPL_TOKENS=${PPL_TOKENS:-4096}	# of the test split, for the +10% search
THREADS=${THREADS:-2}
BUDGETS=${BUDGETS:-0.2,0.3,0.4,0.5,0.6,0.7,0.8}
DENSITIES=${DENSITIES:-0.3 0.4 0.5 0.6 0.7 0.8 0.9}
M=$SHARED/models/mix4-5m
DATA=$SHARED/data/mix4
PROMPT="In the beginning God created"
PATH=$BIN:$PATH
mkdir -p "$WORK"
cd "$WORK"

[ -d "$M" ] || { echo "sparse.sh: $M absent" >&2; exit 77; }

# --- inputs, kept between runs
if [ ! -f prof.sfc ]; then
	sf-profile --model "$M" --max-tokens 8000 -q "$DATA"/*.profile.txt | sf-coact -q - -o prof.sfc
fi
for m in identity frequency coact; do
	[ -f "$m.json" ] || sf-place -q --method "$m" prof.sfc -o "$m.json"
done
[ -f codes.sfq ] || sf-encode --model "$M" -t "$THREADS" -o codes.sfq
if [ ! -f calib.json ]; then
	sf-encode --model "$M" --calibrate --codes codes.sfq -t "$THREADS" \
		--corpus "$DATA/kjv.calib.txt" --corpus "$DATA/man.calib.txt" \
		--corpus "$DATA/fortunes.calib.txt" --corpus "$DATA/gcide.calib.txt" \
		--budgets "$BUDGETS" --calib-tokens "${CALIB_TOKENS:-256}" --window 128 -o calib.json
fi
for m in identity frequency coact; do
	[ -f "$m.sfimg" ] || sf-pack --model "$M" --placement "$m.json" --codes codes.sfq \
		--calib calib.json -o "$m.sfimg"
done
cat "$DATA"/kjv.test.txt "$DATA"/man.test.txt > test.txt

# --- the +10% perplexity points (--simulate gives the same perplexity);
# DENSITY and BUDGET given skip the search
ppl() { sf-run --ppl test.txt --max-tokens "$PPL_TOKENS" --window 256 -t "$THREADS" "$@" | jq .ppl; }
if [ -n "${DENSITY:-}" ] && [ -n "${BUDGET:-}" ]; then
	density=$DENSITY budget=$BUDGET
else
dense=$(sf-run --model "$M" --ppl test.txt --max-tokens "$PPL_TOKENS" --window 256 | jq .ppl)
target=$(jq -n "$dense * 1.1")
echo "dense perplexity $dense, target $target"
density=1
for d in $DENSITIES; do
	p=$(ppl --density "$d" --simulate coact.sfimg)
	echo "TEAL density $d: ppl $p"
	if jq -e -n "$p <= $target" >/dev/null; then density=$d; break; fi
done
budget=1
for b in ${BUDGETS//,/ }; do
	p=$(ppl --budget "$b" --simulate coact.sfimg)
	echo "tiers budget $b: ppl $p"
	if jq -e -n "$p <= $target" >/dev/null; then budget=$b; break; fi
done
fi

# --- latency: median over repeats of the per-token p50, and the I/O figures
bench() {
	local name=$1
	shift
	for _ in $(seq "$REPEATS"); do
		sf-run -p "$PROMPT" -n "$N" --temp 0 --ignore-eos -t "$THREADS" --bench "$@"
	done | jq -s --arg name "$name" '
		def med: sort | .[length / 2 | floor];
		{ name: $name,
		  p50_ms: (map(.latency_seconds.p50) | med * 1000),
		  p90_ms: (map(.latency_seconds.p90) | med * 1000),
		  budget: .[0].budget,
		  requests_per_token: .[0].requests_per_token,
		  mean_read_length: .[0].mean_read_length,
		  mb_moved_per_token: (.[0].bytes_moved_per_token / 1e6),
		  moved_over_needed: .[0].bytes_moved_over_needed,
		  io_wait_ms_per_token: (map(.io_wait_seconds / .tokens) | med * 1000),
		  compute_ms_per_token: (map(.compute_seconds / .tokens) | med * 1000),
		  raw_mb_s: (map(.raw_bandwidth) | med / 1e6) }' | tee -a results.jsonl
}
: > results.jsonl
bench dense-offload --budget 1 --cache-policy none identity.sfimg
bench "teal-$density" --density "$density" --cache-policy none identity.sfimg
bench "tiers-$budget" --budget "$budget" --cache-policy none coact.sfimg
for m in identity frequency coact; do
	for c in 0 auto; do
		bench "$m-collapse-$c" --budget "$budget" --collapse "$c" --cache-policy none "$m.sfimg"
	done
done
jq -s -r --arg d "$density" --arg b "$budget" '
	(.[0].p50_ms) as $dense |
	"TEAL density \($d), tiers budget \($b)",
	(.[] | "\(.name): p50 \(.p50_ms | . * 1000 | round / 1000) ms, speed-up \($dense / .p50_ms | . * 100 | round / 100)x, \(.requests_per_token | round) req/token, read length \(.mean_read_length | . * 100 | round / 100), \(.mb_moved_per_token | . * 1000 | round / 1000) MB/token")' results.jsonl
