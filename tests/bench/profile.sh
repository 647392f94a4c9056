#!/usr/bin/env bash
# sf-profile recording cost on mix4-5m: teacher-forced tokens/s with the
# trace recorded (density 0.3, every layer and group, written to a file)
# against the same run with --dry-run (the dense forward pass alone), and
# against sf-run --ppl on the same tokens (dense, with logits), at -t 1
# and -t 2. Target: recording costs at most 25% over the dense pass.
# Usage: SF_BIN=... SF_SHARED=... tests/bench/profile.sh  (RUNS, TOKENS)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
shared=${SF_SHARED:-$root/../shared}
runs=${RUNS:-3}
tokens=${TOKENS:-8192}
model=$shared/models/mix4-5m
corpus=$shared/data/mix4/kjv.profile.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Seconds of the best of $runs runs of a command.
best() {
	local i
	for i in $(seq "$runs"); do
		/usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -n 1
	done | sort -g | head -n 1
}

printf '%-8s %12s %12s %12s %9s\n' threads "record s" "dry-run s" "sf-run s" overhead
for t in 1 2; do
	rec=$(best "$bin/sf-profile" -q -m "$model" -t "$t" --max-tokens "$tokens" "$corpus" -o "$work/t.sft")
	dry=$(best "$bin/sf-profile" -q -m "$model" -t "$t" --max-tokens "$tokens" --dry-run "$corpus")
	ppl=$(best "$bin/sf-run" -q -m "$model" -t "$t" --ppl "$corpus" --max-tokens "$tokens" --window 256)
	printf '%-8s %12s %12s %12s %8.1f%%\n' "$t" "$rec" "$dry" "$ppl" \
		"$(echo "($rec / $dry - 1) * 100" | bc -l)"
done
echo "($tokens tokens of $(basename "$corpus"); best of $runs; trace $(stat -c %s "$work/t.sft") bytes)"
