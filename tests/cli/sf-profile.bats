#!/usr/bin/env bats
# sf-profile: activation traces of the embedded model from text, JSON
# lines, Alpaca records and CSV, a random Mixtral's experts, and one clear
# error line on bad input.

load helpers

setup() {
	KJV=$BATS_TEST_TMPDIR/kjv.txt
	printf 'In the beginning God created the heaven and the earth.\nAnd the earth was without form.\n\nAnd God said, Let there be light: and there was light.\n\n\nAnd God saw the light, that it was good.\n' >"$KJV"
}

# The slots of a trace as sf-coact --info sees them.
info() { sf-coact -q "$1" -o "$BATS_TEST_TMPDIR/info.sfc" && sf-coact -q --info "$BATS_TEST_TMPDIR/info.sfc"; }

@test "--help prints usage with an example and exits 0" {
	run sf-profile --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"Usage: sf-profile --model MODEL"* ]]
	[[ "$output" == *"Examples:"* ]]
}

@test "--version prints the version" {
	run sf-profile --version
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^sf-profile\ \(sparseflash\)\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
}

@test "an unknown option is a usage error" {
	run sf-profile --frobnicate
	[ "$status" -eq 2 ]
	[ "${lines[-1]}" = "Try 'sf-profile --help'." ]
}

@test "no corpus is a usage error" {
	run --separate-stderr sf-profile --model "$MODEL"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-profile: no corpus given (\"-\" reads standard input)" ]
}

@test "a trace streams into sf-coact through a pipe" {
	run --separate-stderr sh -c 'sf-profile -q -m "$1" --task kjv "$2" | sf-coact -q >"$3"' _ \
		"$MODEL" "$KJV" "$BATS_TEST_TMPDIR/p.sfc"
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	run sf-coact -q --info "$BATS_TEST_TMPDIR/p.sfc"
	[ "$(echo "$output" | jq '.slots | length')" = 16 ]
	[ "$(echo "$output" | jq -c '[.slots[].tasks.kjv] | unique')" = "[63]" ]
}

@test "the density is honoured exactly: round(D*n) entries per token" {
	sf-profile -q -m "$MODEL" --density 0.1 "$KJV" -o "$BATS_TEST_TMPDIR/d.sft"
	run info "$BATS_TEST_TMPDIR/d.sft"
	[ "$status" -eq 0 ]
	# round(0.1 * 128) = 13, round(0.1 * 384) = 38
	[ "$(echo "$output" | jq -c '[.slots[] | .mean_density * .entries] | unique')" = "[13,38]" ]
}

@test "-o naming a corpus is refused, exit 1, the corpus unchanged" {
	local sum
	sum=$(md5sum <"$KJV")
	run --separate-stderr sf-profile -q -m "$MODEL" "$KJV" -o "$KJV"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: $KJV: is also an input ($KJV): refusing to overwrite it" ]
	[ "$(md5sum <"$KJV")" = "$sum" ]
}

@test "-o /dev/null and -o a FIFO: written to in place" {
	sf-profile -q -m "$MODEL" "$KJV" -o /dev/null
	[ -c /dev/null ]
	mkfifo "$BATS_TEST_TMPDIR/fifo"
	cat "$BATS_TEST_TMPDIR/fifo" >"$BATS_TEST_TMPDIR/got.sft" &
	sf-profile -q -m "$MODEL" -t 1 "$KJV" -o "$BATS_TEST_TMPDIR/fifo"
	wait
	[ -p "$BATS_TEST_TMPDIR/fifo" ]
	sf-profile -q -m "$MODEL" -t 1 "$KJV" -o "$BATS_TEST_TMPDIR/want.sft"
	cmp "$BATS_TEST_TMPDIR/got.sft" "$BATS_TEST_TMPDIR/want.sft"
}

@test "--groups: one message for a name that is not a group" {
	run --separate-stderr sf-profile -m "$MODEL" --groups ffn_in,mlp "$KJV"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-profile: --groups: 'mlp' is not attn_in, attn_out, ffn_in, ffn_out or experts" ]
}

@test "--layers and --groups restrict what is recorded" {
	sf-profile -q -m "$MODEL" --layers 1-2 --groups ffn_out,attn_in "$KJV" -o "$BATS_TEST_TMPDIR/l.sft"
	run info "$BATS_TEST_TMPDIR/l.sft"
	[ "$(echo "$output" | jq -c '[.slots[] | "\(.layer) \(.group)"]')" = '["1 attn_in","1 ffn_out","2 attn_in","2 ffn_out"]' ]
}

@test "--max-tokens and --window: windows from an empty cache, stopped at N" {
	sf-profile -q -m "$MODEL" --window 8 --max-tokens 30 "$KJV" -o "$BATS_TEST_TMPDIR/c.sft"
	run info "$BATS_TEST_TMPDIR/c.sft"
	[ "$(echo "$output" | jq '.slots[0].tokens')" = 30 ]
}

@test "JSON lines, Alpaca records and CSV are read" {
	local t=$BATS_TEST_TMPDIR
	printf '{"text": "In the beginning God created the heaven and the earth."}\n{"text": "And God said, \\"Let there be light\\"."}\n' >"$t/a.jsonl"
	printf 'id,text\n1,In the beginning God created the heaven and the earth.\n2,"And God said, ""Let there be light""."\n' >"$t/a.csv"
	sf-profile -q -m "$MODEL" "$t/a.jsonl" -o "$t/j.sft"
	sf-profile -q -m "$MODEL" "$t/a.csv" -o "$t/c.sft"
	run info "$t/j.sft"
	local j=$(echo "$output" | jq -c '[.slots[].crc]')
	run info "$t/c.sft"
	[ "$(echo "$output" | jq -c '[.slots[].crc]')" = "$j" ]
	printf '{"instruction": "Say hi.", "input": "", "output": "hi"}\n' >"$t/al.jsonl"
	run --separate-stderr sf-profile -m "$MODEL" --format alpaca "$t/al.jsonl" -o "$t/al.sft"
	[ "$status" -eq 0 ]
	[[ "$stderr" == "sf-profile: "*" tokens of 1 document in "* ]]
}

@test "the shared JSON lines and CSV give the same trace" {
	need_shared
	local d=$SF_SHARED/data/mix4 t=$BATS_TEST_TMPDIR
	sf-profile -q -m "$MODEL" --max-docs 3 --max-tokens 400 "$d/profile.jsonl" -o "$t/j.sft"
	sf-profile -q -m "$MODEL" --max-docs 3 --max-tokens 400 "$d/profile.csv" -o "$t/c.sft"
	run info "$t/j.sft"
	local j=$(echo "$output" | jq -c '[.slots[].crc]')
	run info "$t/c.sft"
	[ "$(echo "$output" | jq '.slots[0].tokens')" = 400 ]
	[ "$(echo "$output" | jq -c '[.slots[].crc]')" = "$j" ]
}

@test "a density outside (0, 1] is one error line, exit 1, nothing written" {
	mkdir "$BATS_TEST_TMPDIR/out"
	run --separate-stderr sf-profile -m "$MODEL" --density 1.5 "$KJV" -o "$BATS_TEST_TMPDIR/out/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: --density 1.5: expected a value in (0, 1]" ]
	run --separate-stderr sf-profile -m "$MODEL" --density 0 "$KJV" -o "$BATS_TEST_TMPDIR/out/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: --density 0: expected a value in (0, 1]" ]
	run --separate-stderr sf-profile -m "$MODEL" --density -0.1 "$KJV" -o "$BATS_TEST_TMPDIR/out/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: --density -0.1: expected a value in (0, 1]" ]
	[ -z "$(ls -A "$BATS_TEST_TMPDIR/out")" ]
}

@test "the trace bytes do not depend on the threads: -t 1, -t 2 and -t 3 agree" {
	local t=$BATS_TEST_TMPDIR n
	cat "$KJV" "$KJV" "$KJV" "$KJV" >"$t/long.txt"
	# bitmaps, index lists (ffn_out at 0.02) and thresholds; windows of 16
	for sel in "--density 0.3" "--density 0.02" "--threshold 0.2"; do
		for n in 1 2 3; do
			sf-profile -q -m "$MODEL" $sel --window 16 --max-tokens 200 -t "$n" "$t/long.txt" -o "$t/t$n.sft"
		done
		cmp "$t/t1.sft" "$t/t2.sft"
		cmp "$t/t1.sft" "$t/t3.sft"
	done
	run info "$t/t1.sft"
	[ "$(echo "$output" | jq '.slots[0].tokens')" = 200 ]
}

@test "a density that selects no entry is refused" {
	run --separate-stderr sf-profile -m "$MODEL" --density 0.001 "$KJV" -o "$BATS_TEST_TMPDIR/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: density 0.001 selects no entry of attn_in (128 entries)" ]
}

@test "an empty corpus is one error line and leaves no output" {
	printf '\n\n\n' >"$BATS_TEST_TMPDIR/empty.txt"
	mkdir "$BATS_TEST_TMPDIR/out"
	run --separate-stderr sf-profile -m "$MODEL" "$BATS_TEST_TMPDIR/empty.txt" -o "$BATS_TEST_TMPDIR/out/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: $BATS_TEST_TMPDIR/empty.txt: no documents" ]
	[ -z "$(ls -A "$BATS_TEST_TMPDIR/out")" ]
}

@test "a CSV without the named column is one error line" {
	printf 'task,text\nkjv,hello\n' >"$BATS_TEST_TMPDIR/a.csv"
	run --separate-stderr sf-profile -m "$MODEL" --column body "$BATS_TEST_TMPDIR/a.csv" -o "$BATS_TEST_TMPDIR/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: $BATS_TEST_TMPDIR/a.csv: no column \"body\" in the header (task, text)" ]
	[ ! -e "$BATS_TEST_TMPDIR/x.sft" ]
}

@test "a JSON line that is not an object, or lacks the field, is one error line" {
	printf '{"text": "fine"}\n["text"]\n' >"$BATS_TEST_TMPDIR/a.jsonl"
	run --separate-stderr sf-profile -m "$MODEL" "$BATS_TEST_TMPDIR/a.jsonl" -o "$BATS_TEST_TMPDIR/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: $BATS_TEST_TMPDIR/a.jsonl: line 2: not a JSON object" ]
	[ ! -e "$BATS_TEST_TMPDIR/x.sft" ]
	printf '{"body": "fine"}\n' >"$BATS_TEST_TMPDIR/b.jsonl"
	run --separate-stderr sf-profile -m "$MODEL" "$BATS_TEST_TMPDIR/b.jsonl" -o "$BATS_TEST_TMPDIR/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: $BATS_TEST_TMPDIR/b.jsonl: line 1: no field \"text\"" ]
}

@test "a context beyond the model's is refused" {
	run --separate-stderr sf-profile -m "$MODEL" -c 4096 "$KJV" -o "$BATS_TEST_TMPDIR/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: --ctx-size 4096: the model supports at most 1024 positions" ]
	run --separate-stderr sf-profile -m "$MODEL" --window 4096 "$KJV" -o "$BATS_TEST_TMPDIR/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: --window 4096: the model supports at most 1024 positions" ]
	run --separate-stderr sf-profile -m "$MODEL" -c 16 --window 32 "$KJV" -o "$BATS_TEST_TMPDIR/x.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: --window 32: longer than the context (--ctx-size 16)" ]
	[ ! -e "$BATS_TEST_TMPDIR/x.sft" ]
}

@test "-c is the context length as in sf-run: windows no longer, --window the old -c" {
	sf-profile -q -m "$MODEL" -c 8 --max-tokens 30 "$KJV" -o "$BATS_TEST_TMPDIR/c.sft"
	sf-profile -q -m "$MODEL" --window 8 --max-tokens 30 "$KJV" -o "$BATS_TEST_TMPDIR/w.sft"
	cmp "$BATS_TEST_TMPDIR/c.sft" "$BATS_TEST_TMPDIR/w.sft"
	sf-profile -q -m "$MODEL" -c 64 --window 8 --max-tokens 30 "$KJV" -o "$BATS_TEST_TMPDIR/cw.sft"
	cmp "$BATS_TEST_TMPDIR/c.sft" "$BATS_TEST_TMPDIR/cw.sft"
	sf-profile --help | grep -q -- '^  -c, --ctx-size N'
	sf-run --help | grep -q -- '^  -c, --ctx-size N'
}

@test "--density and --threshold cannot be combined" {
	run --separate-stderr sf-profile -m "$MODEL" --density 0.5 --threshold 0.1 "$KJV"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-profile: --density and --threshold cannot be combined" ]
}

@test "--threshold records entries above it" {
	sf-profile -q -m "$MODEL" --threshold 0.5 "$KJV" -o "$BATS_TEST_TMPDIR/t.sft"
	run info "$BATS_TEST_TMPDIR/t.sft"
	[ "$(echo "$output" | jq -r '.selection.mode')" = threshold ]
	[ "$(echo "$output" | jq '[.slots[].mean_density] | max < 1')" = true ]
}

@test "a write error on standard output is reported once" {
	stdout_full_once "sf-profile: (stdout): write error: No space left on device" \
		sf-profile -q -m "$MODEL" "$KJV"
}

@test "--progress into a log: the final line with rate and no ETA" {
	run --separate-stderr sf-profile -m "$MODEL" "$KJV" --progress -o /dev/null
	[ "$status" -eq 0 ]
	[[ "$stderr" != *$'\r'* ]]
	[[ "${stderr_lines[0]}" =~ ^sf-profile:\ [0-9]+\ tokens\ in\ [0-9.]+\ s,\ [0-9.e+]+\ tokens/s$ ]]
}

@test "-b: the trace is the same bytes at every pass size and thread count" {
	local corpus=$BATS_TEST_TMPDIR/c.txt
	# documents longer than a window and than a pass, a short one between
	for i in $(seq 1 40); do printf 'And God said, Let there be light: and there was light. '; done >"$corpus"
	printf '\n\nIn the beginning.\n\n' >>"$corpus"
	for i in $(seq 1 30); do printf 'And the earth was without form, and void. '; done >>"$corpus"
	sf-profile -q -m "$MODEL" --window 160 -b 1 -t 1 --task t "$corpus" -o "$BATS_TEST_TMPDIR/ref.sft"
	for bt in 2:1 7:2 64:3 300:2 160:1; do
		sf-profile -q -m "$MODEL" --window 160 -b "${bt%:*}" -t "${bt#*:}" --task t "$corpus" \
			-o "$BATS_TEST_TMPDIR/b.sft"
		cmp "$BATS_TEST_TMPDIR/ref.sft" "$BATS_TEST_TMPDIR/b.sft"
	done
	# --max-tokens ends inside a pass
	sf-profile -q -m "$MODEL" --window 160 -b 1 --max-tokens 100 "$corpus" -o "$BATS_TEST_TMPDIR/ref.sft"
	sf-profile -q -m "$MODEL" --window 160 -b 64 --max-tokens 100 "$corpus" -o "$BATS_TEST_TMPDIR/b.sft"
	cmp "$BATS_TEST_TMPDIR/ref.sft" "$BATS_TEST_TMPDIR/b.sft"
}

@test "-b 0 and -b beyond 4096 are usage errors" {
	run sf-profile -m "$MODEL" -b 0 "$KJV"
	[ "$status" -eq 2 ]
	run sf-profile -m "$MODEL" -b 4097 "$KJV"
	[ "$status" -eq 2 ]
}

@test "-v states the memory before the first pass" {
	run --separate-stderr sf-profile -v --model "$MODEL" --max-tokens 8 -o "$BATS_TEST_TMPDIR/t.sft" - <<< "In the beginning"
	[ "$status" -eq 0 ]
	[[ "${stderr_lines[1]}" =~ ^"sf-profile: memory: about "[0-9.]+" MiB: the weights (mapped), run state, recorder"$ ]]
}

# The experts slots against the routes the decoder gets: test_trace.
@test "a mixture: attention as dense, each token's experts its 2 picks whatever --density, the same bytes at any -b; ffn_in of a mixture, experts of a dense model refused" {
	local t=$BATS_TEST_TMPDIR
	"$SF_FIXTURES/mkmodel" -o "$t/mix" --arch mixtral --experts 4 --experts-used 2 --layers 2 \
		--hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 1024 --seed 3 \
		--tokenizer "$MODEL" >/dev/null
	sf-profile -q -m "$t/mix" --density 0.1 "$KJV" -o "$t/a.sft"
	sf-profile -q -m "$t/mix" --groups experts --threshold 0.5 -b 3 -t 1 "$KJV" -o "$t/b.sft"
	# the header: version 3, the experts' count and picks a token
	[ "$(od -An -tu4 -j8 -N4 "$t/a.sft" | tr -d ' ')" = 3 ]
	tail -c +17 "$t/a.sft" | head -c "$(od -An -tu4 -j12 -N4 "$t/a.sft")" >"$t/h.json"
	jq -e '.groups == ["attn_in", "attn_out", "experts"] and .entries.experts == 4 and
		.experts_used == 2 and ([.slots[] | select(.group == "experts") | .k] == [2, 2])' \
		"$t/h.json"
	run info "$t/a.sft"
	[ "$status" -eq 0 ]
	# round(0.1 * 64) = 6 for attention; 2 of 4 experts a token
	[ "$(echo "$output" | jq -c '[.slots[] | [.group, .mean_density * .entries]] | unique')" = \
		'[["attn_in",6],["attn_out",6],["experts",2]]' ]
	# the experts slots alike under another selection and pass size
	[ "$(echo "$output" | jq -c '[.slots[] | select(.group == "experts") | .crc]')" = \
		"$(info "$t/b.sft" | jq -c '[.slots[].crc]')" ]
	run --separate-stderr sf-profile -m "$t/mix" --groups attn_in,ffn_in "$KJV" -o "$t/c.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: ffn_in: a mixture of experts has no dense FFN (its experts are recorded as experts)" ]
	run --separate-stderr sf-profile -m "$MODEL" --groups experts "$KJV" -o "$t/c.sft"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-profile: experts: the model is not a mixture of experts" ]
	[ ! -e "$t/c.sft" ]
}
