# Shared part of the study scripts (tests/bench/study-*.sh, docs/RESULTS.md):
# where the tools, models and data are, the artifacts through
# mk/artifacts.mk, perplexity and --bench helpers with medians, a job pool,
# gnuplot and the closing table. Sourced, not run.
#   QUICK=1          the fast mix4-1m variant (make check, tests/cli/bench.bats)
#   STUDY_OUT=dir    results (default build/studies/NAME)
#   MODEL=dir        the model (default ../shared/models/mix4-5m; QUICK: mix4-1m)
#   ART=dir          the artifacts (default build/artifacts/MODEL's name or mix4-1m-quick)
#   REPEATS, N, PPL_TOKENS, JOBS  runs per latency point, tokens generated,
#                    test tokens per perplexity, parallel perplexity jobs
#   CALIB_TOKENS, BUDGETS, METHODS, PLACEMENTS  the artifacts' (mix4-5m:
#                    256, make's budgets, "trellis scalar", all three)
set -euo pipefail
root=${SF_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
bin=${SF_BIN:-$root/bin}
benchbin=${SF_BENCH:-$root/build/opt/bench}
fixtures=${SF_FIXTURES:-$root/build/opt/fixtures}
shared=${SF_SHARED:-$root/../shared}
data=$shared/data/mix4
study=$(basename "$0" .sh)
study=${study#study-}
out=${STUDY_OUT:-$root/build/studies/$study}
QUICK=${QUICK:-}
JOBS=${JOBS:-2}
GENRES=${GENRES:-kjv fortunes gcide man}
PROMPT=${PROMPT:-In the beginning God created}
export PATH=$bin:$PATH
export LC_ALL=C
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ -n "$QUICK" ]; then
	model=$root/models/mix4-1m
	N=${N:-4}
	REPEATS=${REPEATS:-1}
	PPL_TOKENS=${PPL_TOKENS:-48}
	WINDOW=${WINDOW:-16}
	art=${ART:-$root/build/artifacts/mix4-1m-quick}
	ART_OPTS=(PROFILE_TOKENS=200 CALIB_TOKENS=8 CALIB_WINDOW=8 BUDGETS=0.3,0.6 METHODS=scalar)
	GENRES=${QUICK_GENRES:-kjv man}
else
	model=${MODEL:-$shared/models/mix4-5m}
	N=${N:-48}
	REPEATS=${REPEATS:-3}
	PPL_TOKENS=${PPL_TOKENS:-1024}
	WINDOW=${WINDOW:-256}
	art=${ART:-$root/build/artifacts/$(basename "$model")}
	ART_OPTS=(PROFILE_TOKENS=4000 CALIB_TOKENS="${CALIB_TOKENS:-256}" CALIB_WINDOW=128
		  "METHODS=${METHODS:-trellis scalar}" ${PLACEMENTS:+"PLACEMENTS=$PLACEMENTS"}
		  ${BUDGETS:+"BUDGETS=$BUDGETS"})
fi
[ -d "$model" ] || { echo "study-$study: $model absent" >&2; exit 77; }
[ -d "$data" ] || { echo "study-$study: $data absent" >&2; exit 77; }
# the model and the machine, which the plots name in their titles
# (tests/bench/plot/setup.gp): CPU, count, load average at the start, date
basename "$model" > "$out/model.txt"
echo "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1 | tr -s ' '), $(nproc) CPUs," \
	"load $(cut -d' ' -f1 /proc/loadavg), $(date -u +%Y-%m-%d)" > "$out/machine.txt"
# device figures for --collapse auto are read from here (sf-run --probe-device)
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-$HOME/.cache}

log() { echo "study-$study: $*" >&2; }

# Every artifact of $model (mk/artifacts.mk), rebuilt only when out of date.
artifacts() {
	local c=() k=()
	for g in fortunes gcide kjv man; do	# the order of make's $(wildcard)
		c+=("$data/$g.profile.txt")
		k+=("$data/$g.calib.txt")
	done
	make -s -C "$root" -f mk/artifacts.mk artifacts SF_BIN="$bin" MODEL="$model" OUT="$art" \
		CORPUS="${c[*]}" CALIB_CORPUS="${k[*]}" -j"$JOBS" "${ART_OPTS[@]}" >&2
}

# The model's layer count, and the budgets an image was calibrated for.
n_layers() { jq .num_hidden_layers "$model/config.json"; }
budgets_of() { sf-pack --info "$1" | jq -r '.tiers.budgets | map(tostring) | join(" ")'; }
realised_of() { sf-pack --info "$1" | jq --argjson b "$2" '.tiers | .realised[.budgets | index($b)]'; }

# Perplexity of the first PPL_TOKENS tokens of FILE with sf-run ARGS.
ppl() {
	local f=$1
	shift
	sf-run --ppl "$f" --max-tokens "$PPL_TOKENS" --window "$WINDOW" -t 1 -q "$@" | jq .ppl
}
dense_ppl() { ppl "$1" --model "$model"; }

# A pool of JOBS background jobs: pool_run CMD...; pool_wait at the end.
pool_run() {
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
	"$@" &
}
pool_wait() {
	local p
	for p in $(jobs -rp); do wait "$p"; done
}

# REPEATS generation runs with --bench; one JSON line: name, medians of the
# timings, the I/O figures of the first run (they do not vary: the selection
# is deterministic) and the raw ones. bench NAME ARGS... (image last)
bench() {
	local name=$1 r
	shift
	for r in $(seq "$REPEATS"); do
		sf-run -p "$PROMPT" -n "$N" --temp 0 --ignore-eos -t "${THREADS:-2}" -q --bench "$@"
	done | jq -c -s --arg name "$name" --argjson runs "$REPEATS" '
		def med: sort | .[length / 2 | floor];
		{ name: $name, runs: $runs,
		  p50_ms: (map(.latency_seconds.p50) | med * 1000),
		  p90_ms: (map(.latency_seconds.p90) | med * 1000),
		  mean_ms: (map(.latency_seconds.mean) | med * 1000),
		  p50_ms_all: map(.latency_seconds.p50 * 1000),
		  compute_ms: (map(.compute_seconds / .tokens) | med * 1000),
		  io_wait_ms: (map(.io_wait_seconds / .tokens) | med * 1000),
		  sparse_ms: (map(.sparse_seconds / .tokens) | med * 1000),
		  budget: .[0].budget,
		  requests_per_token: .[0].requests_per_token,
		  runs_per_token: .[0].runs_per_token,
		  mean_read_length: .[0].mean_read_length,
		  bytes_moved_per_token: .[0].bytes_moved_per_token,
		  bytes_needed_per_token: .[0].bytes_needed_per_token,
		  moved_over_needed: .[0].bytes_moved_over_needed,
		  bytes_per_request: (.[0].bytes_moved / ([.[0].requests, 1] | max)),
		  effective_mb_s: (map(.effective_bandwidth) | med / 1e6),
		  raw_mb_s: (map(.raw_bandwidth) | med / 1e6),
		  hit_rate: .[0].cache.hit_rate,
		  collapse: .[0].collapse,
		  histogram: .[0].read_length_histogram,
		  backend: .[0].backend }'
}

# Dense in-RAM decoder: median ms per decoded token.
bench_ram() {
	local r
	for r in $(seq "$REPEATS"); do
		sf-run --model "$model" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos -t "${THREADS:-2}" -q --stats -
	done 2>/dev/null | jq -c -s --argjson runs "$REPEATS" '
		def med: sort | .[length / 2 | floor];
		{ name: "dense-ram", runs: $runs, p50_ms: (map(1000 / .decode_tokens_per_second) | med),
		  p50_ms_all: map(1000 / .decode_tokens_per_second), budget: 1, bytes_moved_per_token: 0,
		  bytes_needed_per_token: 0, requests_per_token: 0 }'
}

# NAME.png from the data in $out (tests/bench/plot/plot.sh NAME.gp);
# skipped without gnuplot. make plots redraws it later from the same data.
plot() {
	local rc=0
	"$root/tests/bench/plot/plot.sh" "$1" "$out" || rc=$?
	[ "$rc" -eq 77 ] && return 0
	return "$rc"
}

# Print a CSV file as an aligned table.
table() { column -s, -t < "$1"; }

# The calibrated budget or TEAL density whose mean perplexity increase over
# the genres stays within PCT percent: from $out/../quality/summary.json
# when study-quality has run, else searched here on a test mix (slower).
at_pct() {	# METHOD PCT -> budget
	local q=$out/../quality/summary.json
	if [ -f "$q" ]; then
		jq -e -r --arg m "$1" --argjson p "$2" \
			'.[] | select(.method == $m) | .at_pct[] | select(.pct == $p) | .budget_grid' "$q" && return
	fi
	local mix=$out/test-mix.txt img b d p
	[ -f "$mix" ] || for g in $GENRES; do cat "$data/$g.test.txt"; echo; done > "$mix"
	d=$(dense_ppl "$mix")
	img=$art/identity-${1#spax-}.sfimg
	if [ "$1" = teal ]; then
		img=$(ls "$art"/identity-*.sfimg | head -n 1)
		set -- "$1" "$2" 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1
	else
		set -- "$1" "$2" $(budgets_of "$img") 1
	fi
	local m=$1 pct=$2
	shift 2
	for b in "$@"; do
		if [ "$m" = teal ]; then p=$(ppl "$mix" --density "$b" --simulate "$img")
		else p=$(ppl "$mix" --budget "$b" --simulate "$img"); fi
		if jq -e -n "$p <= $d * (1 + $pct / 100)" >/dev/null; then echo "$b"; return; fi
	done
	echo 1
}

# The device peak --collapse auto compares with: measured once per device
# (sf-run --probe-device, 1 GiB written, about 12 s) unless QUICK, where
# auto keeps its fixed gap of 32 KiB (sf-run says so in the collapse figures).
probe_device() {
	[ -n "$QUICK" ] && return 0
	local f
	f=$XDG_CACHE_HOME/sparseflash/device-$(stat -c '%Hd-%Ld' "$art").json
	if ! [ -f "$f" ]; then
		log "probing the device holding $art (sf-run --probe-device)"
		sf-run --probe-device "$art" >&2
	fi
	jq -c '{small, large}' "$f" > "$out/device.json"
}

# The code method of the flash images: trellis when built, else the other.
image_method() {
	local m
	for m in trellis scalar; do
		[ -f "$art/coact-$m.sfimg" ] && { echo "$m"; return; }
	done
	echo "study-$study: no image in $art" >&2
	return 1
}
