#!/usr/bin/env bats
# make plots (mk/studies.mk, tests/bench/plot): the PNGs of the studies
# redrawn from their data without running them, on the data of
# tests/fixtures/plots.
load helpers

setup() {
	command -v gnuplot >/dev/null || skip "gnuplot absent (apt-get install gnuplot-nox)"
	cp -r "$SF_ROOT/tests/fixtures/plots" "$BATS_TEST_TMPDIR/studies"
	mkdir "$BATS_TEST_TMPDIR/img"
}

png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }

@test "make plots: every study's PNG redrawn from its data and copied to IMG" {
	run --separate-stderr make -s -C "$SF_ROOT" plots STUDIES_OUT="$BATS_TEST_TMPDIR/studies" IMG="$BATS_TEST_TMPDIR/img"
	[ "$status" -eq 0 ]
	for s in quality placement cache e2e tasks scale; do
		png "$BATS_TEST_TMPDIR/studies/$s/$s.png"
		cmp "$BATS_TEST_TMPDIR/studies/$s/$s.png" "$BATS_TEST_TMPDIR/img/$s.png"
		[[ "$output" == *"$s/$s.png -> $BATS_TEST_TMPDIR/img/$s.png"* ]]
	done
}

@test "make plots: a study without data is named, the others drawn" {
	rm -r "$BATS_TEST_TMPDIR/studies/cache"
	run --separate-stderr make -s -C "$SF_ROOT" plots STUDY="cache scale" \
		STUDIES_OUT="$BATS_TEST_TMPDIR/studies" IMG=
	[ "$status" -eq 0 ]
	[ "$stderr" = "make plots: $BATS_TEST_TMPDIR/studies/cache absent: cache not drawn (make studies STUDY=cache)" ]
	[ "$output" = "$BATS_TEST_TMPDIR/studies/scale/scale.png" ]
	png "$BATS_TEST_TMPDIR/studies/scale/scale.png"
	[ ! -e "$BATS_TEST_TMPDIR/img/scale.png" ]
}

@test "plots name the model and the machine in their titles" {
	for s in quality placement cache e2e tasks; do
		grep -q '^set multiplot .*\.setup$' "$SF_ROOT/tests/bench/plot/$s.gp"
	done
	grep -q 'on "\.machine' "$SF_ROOT/tests/bench/plot/scale.gp"
	# what the titles say: the study's model and machine, or that they were not recorded
	cat > "$BATS_TEST_TMPDIR/t.gp" <<-'GP'
	load lib."/setup.gp"
	print setup
	GP
	run gnuplot -e "dir='$BATS_TEST_TMPDIR/studies/quality'; lib='$SF_ROOT/tests/bench/plot'" "$BATS_TEST_TMPDIR/t.gp"
	[ "$output" = "mix4-1m on $(cat "$BATS_TEST_TMPDIR/studies/quality/machine.txt")" ]
	run gnuplot -e "dir='$BATS_TEST_TMPDIR'; lib='$SF_ROOT/tests/bench/plot'" "$BATS_TEST_TMPDIR/t.gp"
	[ "$output" = "model not recorded on machine not recorded" ]
}
