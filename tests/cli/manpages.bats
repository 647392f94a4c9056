#!/usr/bin/env bats
# Every command has a man page, every option its --help lists is in it, and
# the man pages' examples run.

load helpers

@test "every command has a man page" {
	for d in "$SF_ROOT"/cmd/sf-*; do
		[ -f "$SF_ROOT/man/$(basename "$d").1" ] || { echo "no man page for $(basename "$d")"; false; }
	done
}

@test "every option in --help is in the man page" {
	local missing=0
	for d in "$SF_ROOT"/cmd/sf-*; do
		local cmd; cmd=$(basename "$d")
		for opt in $("$SF_BIN/$cmd" --help | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u); do
			# man pages escape the hyphens: \-\-opt
			local escaped=${opt//-/\\\\-}
			if ! grep -qE -- "$escaped" "$SF_ROOT/man/$cmd.1"; then
				echo "$cmd: $opt is not in man/$cmd.1"
				missing=1
			fi
		done
	done
	[ "$missing" -eq 0 ]
}

@test "man pages render without warnings" {
	command -v groff >/dev/null || command -v nroff >/dev/null || skip "groff not installed"
	for m in "$SF_ROOT"/man/*.[1-9]; do
		run sh -c 'LC_ALL=C.UTF-8 groff -t -man -Tutf8 -ww -z "$1" 2>&1' _ "$m"
		[ -z "$output" ] || { echo "$m: $output"; false; }
	done
}

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
