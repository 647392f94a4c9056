#!/usr/bin/env bash
# sf-profile recording cost on mix4-5m: teacher-forced tokens/s with the
# trace recorded (density 0.3, every layer and group, written to a file)
# against the same run with --dry-run (the dense forward pass alone), and
# against sf-run --ppl on the same tokens (dense, with logits), at -t 1
# and -t 2. Target: recording costs at most 25% over the dense pass.
# Each run times the three back to back and its overhead is that run's
# record / dry-run ratio, so a shared machine's load shifts both alike;
# the medians of the runs are reported, and every run's overhead.
# Usage: SF_BIN=... SF_SHARED=... tests/bench/profile.sh  (RUNS, TOKENS)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
shared=${SF_SHARED:-$root/../shared}
runs=${RUNS:-5}
tokens=${TOKENS:-8192}
model=$shared/models/mix4-5m
corpus=$shared/data/mix4/kjv.profile.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Seconds of one run of a command.
secs() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -n 1; }

printf '%-8s %10s %10s %10s %9s  %s\n' threads "record s" "dry-run s" "sf-run s" overhead \
	"overhead of each run"
for t in 1 2; do
	: >"$work/rec"; : >"$work/dry"; : >"$work/ppl"; : >"$work/over"
	for i in $(seq "$runs"); do
		rec=$(secs "$bin/sf-profile" -q -m "$model" -t "$t" --max-tokens "$tokens" "$corpus" -o "$work/t.sft")
		dry=$(secs "$bin/sf-profile" -q -m "$model" -t "$t" --max-tokens "$tokens" --dry-run "$corpus")
		ppl=$(secs "$bin/sf-run" -q -m "$model" -t "$t" --ppl "$corpus" --max-tokens "$tokens" --window 256)
		echo "$rec" >>"$work/rec"; echo "$dry" >>"$work/dry"; echo "$ppl" >>"$work/ppl"
		printf '%.1f\n' "$(echo "($rec / $dry - 1) * 100" | bc -l)" >>"$work/over"
	done
	printf '%-8s %10s %10s %10s %8s%%  %s\n' "$t" "$(median <"$work/rec")" "$(median <"$work/dry")" \
		"$(median <"$work/ppl")" "$(median <"$work/over")" "$(paste -sd ' ' "$work/over")"
done
echo "($tokens tokens of $(basename "$corpus"); medians of $runs runs; trace $(stat -c %s "$work/t.sft") bytes)"
