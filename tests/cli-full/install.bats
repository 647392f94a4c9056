#!/usr/bin/env bats
# make install into a DESTDIR: the commands and man pages work from there,
# a program builds against the library with pkg-config alone, bash
# completion offers each command's options, and make uninstall removes
# everything it put there (make check-full: it builds the library).

load ../cli/helpers

setup_file() {
	export STAGE
	STAGE=$(mktemp -d "${SF_TMP:-/tmp}/install.XXXXXX")
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$SF_ROOT" install \
		DESTDIR="$STAGE" PREFIX=/usr >/dev/null
}

teardown_file() {
	rm -rf "$STAGE"
}

@test "the installed commands run and their man pages render" {
	run "$STAGE/usr/bin/sf-run" --version
	[ "$status" -eq 0 ]
	[[ $output == "sf-run (sparseflash) "* ]]
	for m in sf-run.1 sf-pack.1; do
		[ -f "$STAGE/usr/share/man/man1/$m" ]
	done
	[ -f "$STAGE/usr/share/man/man5/sf-formats.5" ]
	[ -f "$STAGE/usr/share/man/man7/sparseflash.7" ]
}

@test "a program builds against the installed library with pkg-config alone" {
	command -v pkg-config >/dev/null || skip "pkg-config not installed"
	cat > "$BATS_TEST_TMPDIR/fp.c" <<'C'
#include <stdio.h>
#include "formats/model.h"
int main(int argc, char **argv)
{
	struct sf_model m;
	struct sf_err e = { 0 };
	if (argc != 2 || sf_model_open(&m, argv[1], &e)) {
		fprintf(stderr, "fp: %s\n", e.msg);
		return 1;
	}
	printf("%s %d\n", m.fingerprint.weights, m.cfg.n_layers);
	sf_model_close(&m);
	return 0;
}
C
	export PKG_CONFIG_SYSROOT_DIR=$STAGE PKG_CONFIG_PATH=$STAGE/usr/lib/pkgconfig
	run pkg-config --cflags --libs sparseflash
	[ "$status" -eq 0 ]
	[[ $output == *"-I$STAGE/usr/include/sparseflash"* ]]
	cc -std=c11 -o "$BATS_TEST_TMPDIR/fp" "$BATS_TEST_TMPDIR/fp.c" \
		$(pkg-config --cflags sparseflash) $(pkg-config --libs sparseflash)
	run "$BATS_TEST_TMPDIR/fp" "$MODEL"
	[ "$status" -eq 0 ]
	[[ $output =~ ^[0-9a-f]{16}\ 4$ ]]
}

@test "bash completion offers the command's own options" {
	source "$STAGE/usr/share/bash-completion/completions/sf-run"
	PATH=$STAGE/usr/bin:$PATH
	COMP_WORDS=(sf-run --bud)
	COMP_CWORD=1
	_sparseflash sf-run --bud sf-run
	[ "${COMPREPLY[*]}" = "--budget" ]
	COMP_WORDS=(sf-pack --ver)
	_sparseflash sf-pack --ver sf-pack
	[[ " ${COMPREPLY[*]} " == *" --verify "* && " ${COMPREPLY[*]} " == *" --version "* ]]
	COMP_WORDS=(sf-run -cn)
	_sparseflash sf-run -cn sf-run
	[ "${COMPREPLY[*]}" = "-cnv" ]
	# --chat-template's names, from sf-run itself
	COMP_WORDS=(sf-run -cnv --chat-template ch)
	COMP_CWORD=3
	_sparseflash sf-run ch --chat-template
	[ "${COMPREPLY[*]}" = "chatml" ]
}

@test "make uninstall removes everything install put there" {
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$SF_ROOT" uninstall \
		DESTDIR="$STAGE" PREFIX=/usr
	run find "$STAGE" -type f
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}
