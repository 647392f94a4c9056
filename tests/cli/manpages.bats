#!/usr/bin/env bats
# Every command has a man page and every option its --help lists is in it
# (the examples run in tests/cli-full/manpages.bats).

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

@test "make help and the README give the same times for make demo, check and check-full" {
	local t help
	help=$(make -s -C "$SF_ROOT" help)
	for t in demo check check-full; do
		local readme mk
		readme=$(sed -n "s/^make $t  *#.*: \(about [0-9.]* [a-z]*\)$/\1/p" "$SF_ROOT/README.md")
		mk=$(echo "$help" | sed -n "s/^  $t  .*: \(about [0-9.]* [a-z]*\).*/\1/p")
		echo "$t: README '$readme', make help '$mk'"
		[ -n "$readme" ] && [ "$readme" = "$mk" ]
	done
}
