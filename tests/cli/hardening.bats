#!/usr/bin/env bats
# Hostile model directories and artifacts (issue 18, library side): FIFOs
# and directories where a model's files should be, token ids beyond the
# embedding, non-finite weights, damaged codes and calibration; each is
# one line naming the file and exit 1, never a hang or a crash.

load helpers

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
