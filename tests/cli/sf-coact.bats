#!/usr/bin/env bats
# sf-coact: statistics from traces, merges, --layers splits, scores, and
# one clear error line for damaged inputs and inputs of other models.

load helpers

setup_file() {
	local t=$BATS_FILE_TMPDIR
	printf 'In the beginning God created the heaven and the earth.\n\nAnd God said, Let there be light: and there was light.\n' >"$t/a.txt"
	printf 'NAME\n    ls - list directory contents\n\nSYNOPSIS\n    ls [OPTION]... [FILE]...\n' >"$t/b.txt"
	sf-profile -q -m "$MODEL" --task kjv "$t/a.txt" -o "$t/a.sft"
	sf-profile -q -m "$MODEL" --task man "$t/b.txt" -o "$t/b.sft"
	# another model: same tokenizer, another shape, so another fingerprint
	"$SF_FIXTURES/mkmodel" -o "$t/other" --hidden 64 --intermediate 192 --layers 2 \
		--heads 2 --kv-heads 1 --tokenizer "$MODEL" >/dev/null
	sf-profile -q -m "$t/other" "$t/a.txt" -o "$t/other.sft"
}

T() { echo "$BATS_FILE_TMPDIR/$1"; }
slots() { sf-coact -q --info "$1" | jq -c '[.slots[] | [.layer, .group, .tokens, .crc]]'; }

@test "--help prints usage with an example and exits 0" {
	run sf-coact --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"Usage: sf-coact [options] [TRACE...]"* ]]
	[[ "$output" == *"Examples:"* ]]
}

@test "--version prints the version" {
	run sf-coact --version
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^sf-coact\ \(sparseflash\)\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
}

@test "an unknown option is a usage error" {
	run sf-coact --frobnicate
	[ "$status" -eq 2 ]
	[ "${lines[-1]}" = "Try 'sf-coact --help'." ]
}

@test "the memory needed is stated before allocating" {
	run --separate-stderr sf-coact "$(T a.sft)" -o "$BATS_TEST_TMPDIR/a.sfc"
	[ "$status" -eq 0 ]
	# 4 layers x (3 x 128 + 384 entries): pairs, counts, sums and bit vectors
	[ "${stderr_lines[0]}" = "sf-coact: 4 layer(s), 16 layer-group(s): statistics need 3188736 bytes (3.0 MiB)" ]
}

@test "--max-memory refuses with the figure and writes nothing" {
	run --separate-stderr sf-coact -q --max-memory 1M "$(T a.sft)" -o "$BATS_TEST_TMPDIR/a.sfc"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: statistics need 3188736 bytes (3.0 MiB), more than --max-memory 1048576; restrict with --layers" ]
	[ ! -e "$BATS_TEST_TMPDIR/a.sfc" ]
}

@test "traces are read from standard input" {
	sf-coact -q <"$(T a.sft)" >"$BATS_TEST_TMPDIR/s.sfc"
	sf-coact -q "$(T a.sft)" -o "$BATS_TEST_TMPDIR/f.sfc"
	[ "$(slots "$BATS_TEST_TMPDIR/s.sfc")" = "$(slots "$BATS_TEST_TMPDIR/f.sfc")" ]
}

@test "merge(a, b) equals a and b fed together" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$t/a.sfc"
	sf-coact -q "$(T b.sft)" -o "$t/b.sfc"
	sf-coact -q "$(T a.sft)" "$(T b.sft)" -o "$t/ab.sfc"
	sf-coact -q --merge "$t/a.sfc" "$t/b.sfc" -o "$t/m.sfc"
	[ "$(slots "$t/m.sfc")" = "$(slots "$t/ab.sfc")" ]
	run sf-coact -q --info "$t/m.sfc"
	[ "$(echo "$output" | jq -c '.slots[0].tasks')" = "$(sf-coact -q --info "$t/ab.sfc" | jq -c '.slots[0].tasks')" ]
}

@test "--layers splits merged equal the whole" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$t/whole.sfc"
	sf-coact -q --layers 0-1 "$(T a.sft)" -o "$t/lo.sfc"
	sf-coact -q --layers 2-3 "$(T a.sft)" -o "$t/hi.sfc"
	[ "$(sf-coact -q --info "$t/lo.sfc" | jq -c '[.slots[].layer] | unique')" = "[0,1]" ]
	sf-coact -q --merge "$t/hi.sfc" "$t/lo.sfc" -o "$t/m.sfc"
	[ "$(slots "$t/m.sfc")" = "$(slots "$t/whole.sfc")" ]
	# and --layers picks a layer out of a .sfc
	sf-coact -q --merge --layers 2 "$t/whole.sfc" -o "$t/two.sfc"
	[ "$(slots "$t/two.sfc")" = "$(slots "$t/whole.sfc" | jq -c '[.[] | select(.[0] == 2)]')" ]
}

@test "--scores writes task scores; --merge-scores weights them by tokens" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$t/a.sfc" --scores "$t/a.json"
	sf-coact -q "$(T b.sft)" -o "$t/b.sfc" --scores "$t/b.json"
	[ "$(jq -r '.kind + " " + .task' "$t/a.json")" = "task kjv" ]
	sf-coact --merge-scores "$t/a.json" "$t/b.json" -o "$t/model.json"
	[ "$(jq -r '.kind' "$t/model.json")" = model ]
	local ta tb
	ta=$(jq '.slots[3].tokens' "$t/a.json")
	tb=$(jq '.slots[3].tokens' "$t/b.json")
	[ "$(jq '.slots[3].tokens' "$t/model.json")" = $((ta + tb)) ]
	# entry 7 of layer 0 ffn_out: (sa * ta + sb * tb) / (ta + tb)
	run jq -n --slurpfile a "$t/a.json" --slurpfile b "$t/b.json" --slurpfile m "$t/model.json" \
		'($a[0].slots[3].scores[7] * $a[0].slots[3].tokens + $b[0].slots[3].scores[7] * $b[0].slots[3].tokens)
		 / ($a[0].slots[3].tokens + $b[0].slots[3].tokens) - $m[0].slots[3].scores[7] | fabs < 1e-12'
	[ "$output" = true ]
}

@test "a truncated trace is one error line and no output" {
	local t=$BATS_TEST_TMPDIR
	head -c 5000 "$(T a.sft)" >"$t/cut.sft"
	run --separate-stderr sf-coact -q "$t/cut.sft" -o "$t/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/cut.sft: truncated at byte 5000: block 0 needs "[0-9]+" bytes, "[0-9]+" left"$ ]]
	[ ! -e "$t/x.sfc" ]
}

@test "a corrupted trace is one error line" {
	local t=$BATS_TEST_TMPDIR
	cp "$(T a.sft)" "$t/bad.sft"
	printf '\377' | dd of="$t/bad.sft" bs=1 seek=3000 conv=notrunc status=none
	run --separate-stderr sf-coact -q "$t/bad.sft" -o "$t/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/bad.sft: block 0: checksum 0x"[0-9a-f]{8}", the block says 0x"[0-9a-f]{8}$ ]]
	[ ! -e "$t/x.sfc" ]
}

@test "something that is not a trace is one error line" {
	run --separate-stderr sf-coact -q "$MODEL/config.json" -o "$BATS_TEST_TMPDIR/x.sfc"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $MODEL/config.json: not a sparseflash trace (bad magic)" ]
}

@test "traces of different models are refused, naming both" {
	run --separate-stderr sf-coact -q "$(T a.sft)" "$(T other.sft)" -o "$BATS_TEST_TMPDIR/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $(T other.sft): model fingerprint "[0-9a-f]{16}" differs from $(T a.sft)'s "[0-9a-f]{16}$ ]]
	[ ! -e "$BATS_TEST_TMPDIR/x.sfc" ]
}

@test ".sfc files of different models are refused, naming both" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$t/a.sfc"
	sf-coact -q "$(T other.sft)" -o "$t/o.sfc"
	run --separate-stderr sf-coact -q --merge "$t/a.sfc" "$t/o.sfc" -o "$t/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/o.sfc: model fingerprint "[0-9a-f]{16}" differs from $t/a.sfc's "[0-9a-f]{16}$ ]]
	[ ! -e "$t/x.sfc" ]
}

@test "a truncated or corrupted .sfc is one error line" {
	local t=$BATS_TEST_TMPDIR size
	sf-coact -q "$(T a.sft)" -o "$t/a.sfc"
	size=$(stat -c %s "$t/a.sfc")
	head -c $((size - 8)) "$t/a.sfc" >"$t/cut.sfc"
	run --separate-stderr sf-coact -q --info "$t/cut.sfc"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $t/cut.sfc: $((size - 8)) bytes: the header describes $size (truncated)" ]
	cp "$t/a.sfc" "$t/bad.sfc"
	printf '\001' | dd of="$t/bad.sfc" bs=1 seek=$((size - 100)) conv=notrunc status=none
	run --separate-stderr sf-coact -q --merge "$t/bad.sfc" -o "$t/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/bad.sfc: layer 3 ffn_out: checksum 0x" ]]
	[ ! -e "$t/x.sfc" ]
}

@test "one and two threads give the same statistics" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q -t 1 "$(T a.sft)" "$(T b.sft)" -o "$t/1.sfc"
	sf-coact -q -t 2 "$(T a.sft)" "$(T b.sft)" -o "$t/2.sfc"
	cmp "$t/1.sfc" "$t/2.sfc"
}
