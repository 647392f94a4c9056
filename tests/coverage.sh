#!/usr/bin/env bash
# make coverage's report: lcov's capture of the counters a COVERAGE=1
# `make check` left in DIR, restricted to lib/ and cmd/, printed as line
# coverage per folder (lines hit / lines instrumented), with an HTML
# report in DIR/html.
# Usage: tests/coverage.sh DIR   (run from the repository)
set -euo pipefail
DIR=$1
ROOT=$(pwd)
lcov -q --capture --directory "$DIR" --base-directory "$ROOT" --no-external \
	--output-file "$DIR/all.info" 2>"$DIR/lcov.log"
lcov -q --extract "$DIR/all.info" "$ROOT/lib/*" "$ROOT/cmd/*" \
	--output-file "$DIR/lcov.info" 2>>"$DIR/lcov.log"
genhtml -q --output-directory "$DIR/html" "$DIR/lcov.info" 2>>"$DIR/lcov.log" >/dev/null
printf '%-24s %15s %7s\n' folder lines cover
awk -F: -v root="$ROOT/" '
	/^SF:/ { f = substr($0, 4); sub(root, "", f); d = f; sub(/\/[^\/]*$/, "", d) }
	/^LF:/ { lf[d] += $2; tf += $2 }
	/^LH:/ { lh[d] += $2; th += $2 }
	END {
		for (d in lf)
			printf "%-24s %7d/%-7d %6.1f%%\n", d, lh[d], lf[d], 100 * lh[d] / lf[d] | "sort"
		close("sort")
		printf "%-24s %7d/%-7d %6.1f%%\n", "total", th, tf, 100 * th / tf
	}' "$DIR/lcov.info"
echo "coverage: HTML report in $DIR/html/index.html"
