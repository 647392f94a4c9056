#!/usr/bin/env bats
# The man pages' examples run as written (make check-full: they build a
# whole pipeline, about a minute).

load ../cli/helpers

# The commands of every EXAMPLES section, one per line (roff escapes and
# continuation lines undone).
man_examples() {
	awk '/^\.SH EXAMPLES/ { ex = 1; next } /^\.SH/ { ex = 0 }
	     ex && /^\.EX/ { inblock = 1; next } /^\.EE/ { inblock = 0; next }
	     ex && inblock { gsub(/\\e/, "\\"); gsub(/\\-/, "-"); print }' "$1" |
		sed -e ':a' -e '/\\$/N; s/\\\n//; ta'
}

@test "the man pages' examples run" {
	need_shared
	local failed=0
	cd "$SF_ROOT"
	for m in man/*.1; do
		while IFS= read -r cmd; do
			[ -n "$cmd" ] || continue
			# examples name ../shared as a user's checkout has it
			cmd=${cmd//..\/shared/$SF_SHARED}
			if ! (cd "$BATS_TEST_TMPDIR" && ln -sfn "$SF_ROOT/models" models &&
			      bash -o pipefail -c "$cmd" >/dev/null 2>"$BATS_TEST_TMPDIR/err"); then
				echo "$m: example failed: $cmd"
				cat "$BATS_TEST_TMPDIR/err"
				failed=1
			fi
		done < <(man_examples "$m")
	done
	[ "$failed" -eq 0 ]
}
