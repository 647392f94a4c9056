#!/usr/bin/env bash
# Runs fuzz harnesses built by tests/fuzz/fuzz.mk, FUZZ_JOBS at a time
# (default 1: the machine is shared), each for FUZZ_SECONDS on its seeds
# plus a working corpus kept between runs; prints per harness the
# executions and libFuzzer's final coverage (cov: edges, ft: features)
# and fails when any harness found a crash, a leak, a hang or ran out of
# memory (the input is left as DIR/crash/NAME-*).
# Usage: run.sh DIR NAME...
set -uo pipefail
DIR=$1
shift
SECS=${FUZZ_SECONDS:-10}
JOBS=${FUZZ_JOBS:-1}
mkdir -p "$DIR/log" "$DIR/crash"

one() {
	local n=$1
	mkdir -p "$DIR/corpus/$n"
	"$DIR/fuzz_$n" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -close_fd_mask=3 -artifact_prefix="$DIR/crash/$n-" \
		${FUZZ_ARGS:-} "$DIR/corpus/$n" "$DIR/seeds/$n" >"$DIR/log/$n.log" 2>&1
	echo $? >"$DIR/log/$n.rc"
}

for n in "$@"; do
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
	one "$n" &
done
wait

fail=0 total=0 passed=0 failed=0
for n in "$@"; do
	rc=$(cat "$DIR/log/$n.rc")
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$DIR/log/$n.log")
	cov=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE|INITED)' "$DIR/log/$n.log" | tail -n 1 |
		grep -oE 'cov: [0-9]+ ft: [0-9]+')
	total=$((total + ${execs:-0}))
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
		printf 'ok   fuzz_%-12s %10s execs  %s\n' "$n" "${execs:-?}" "$cov"
	else
		fail=1 failed=$((failed + 1))
		printf 'FAIL fuzz_%-12s exit %s: see %s\n' "$n" "$rc" "$DIR/log/$n.log"
		# the report from its first line, with the stack and the input's
		# Base64 that libFuzzer prints, so that a CI log alone shows it
		sed -n '/^==[0-9]*== *ERROR\|runtime error\|deadly signal\|ALARM\|out-of-memory/,$p' \
			"$DIR/log/$n.log" | head -n 60
	fi
done
echo "fuzz: $total executions in all"
echo "fuzz: $passed passed, $failed failed"
exit $fail
