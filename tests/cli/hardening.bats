#!/usr/bin/env bats
# Hostile model directories and artifacts (issue 18, library side): FIFOs
# and directories where a model's files should be, token ids beyond the
# embedding, non-finite weights, damaged codes and calibration; each is
# one line naming the file and exit 1, never a hang or a crash.

load helpers

setup_file() {
	export D=$BATS_FILE_TMPDIR
	"$SF_BIN/sf-encode" --model "$MODEL" --method scalar -t 2 -o "$D/codes.sfq"
	"$SF_BIN/sf-encode" --model "$MODEL" --calibrate --codes "$D/codes.sfq" -t 2 \
		--corpus "$SF_ROOT/man/sf-run.1" --budgets 0.5 --calib-tokens 8 --window 8 \
		-o "$D/calib.json"
}

# sf-pack with the codes and calibration CALIB; the image must not appear
pack_calib() {
	run --separate-stderr sf-pack --model "$MODEL" --codes "$D/codes.sfq" --calib "$1" \
		-o "$BATS_TEST_TMPDIR/x.sfimg"
	[ ! -e "$BATS_TEST_TMPDIR/x.sfimg" ]
}

# a copy of the model with NAME replaced by a FIFO nobody writes to
fifo_model() {
	local m
	m=$(copy_model)
	rm -f "$m/$1"
	mkfifo "$m/$1"
	echo "$m"
}

@test "a FIFO for any of a model's files is refused by name, not waited on" {
	for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
		m=$(fifo_model "$f")
		run --separate-stderr timeout 20 sf-run --model "$m" -n 1 -p hi
		[ "$status" -eq 1 ]
		[ "${stderr_lines[0]}" = "sf-run: $m/$f: not a regular file" ]
		run --separate-stderr timeout 20 sf-pack --model "$m" -o "$BATS_TEST_TMPDIR/x.sfimg"
		[ "$status" -eq 1 ]
		[ "${stderr_lines[0]}" = "sf-pack: $m/$f: not a regular file" ]
		[ ! -e "$BATS_TEST_TMPDIR/x.sfimg" ]
		rm -rf "$m"
	done
}

@test "an index.json that is a directory is refused by name" {
	m=$(copy_model)
	mkdir "$m/model.safetensors.index.json"
	run --separate-stderr sf-run --model "$m" -n 1 -p hi
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $m/model.safetensors.index.json: not a regular file" ]
}

@test "calib.json: a budget listed twice is refused by name" {
	jq '.budgets += [.budgets[0]]' "$D/calib.json" > "$BATS_TEST_TMPDIR/c.json"
	pack_calib "$BATS_TEST_TMPDIR/c.json"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $BATS_TEST_TMPDIR/c.json: budget 0.5 listed twice" ]
}

@test "calib.json: a layer beyond the model, or one listed twice, is refused by name" {
	jq '.budgets[0].layers[1].layer = 7' "$D/calib.json" > "$BATS_TEST_TMPDIR/c.json"
	pack_calib "$BATS_TEST_TMPDIR/c.json"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $BATS_TEST_TMPDIR/c.json: budget 0.5: layer 7 is beyond the 4 layers" ]
	jq '.budgets[0].layers[2] = .budgets[0].layers[1]' "$D/calib.json" > "$BATS_TEST_TMPDIR/c.json"
	pack_calib "$BATS_TEST_TMPDIR/c.json"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $BATS_TEST_TMPDIR/c.json: budget 0.5: layer 1 listed where layer 2 belongs (twice, or out of order)" ]
}

@test "calib.json: a value out of range names its budget, layer and group" {
	jq '.budgets[0].layers[2].groups.ffn_in.k_top = 99999' "$D/calib.json" > "$BATS_TEST_TMPDIR/c.json"
	pack_calib "$BATS_TEST_TMPDIR/c.json"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $BATS_TEST_TMPDIR/c.json: budget 0.5 layer 2 ffn_in: \"k_top\" is 99999: expected 0..128" ]
}
