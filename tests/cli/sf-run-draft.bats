#!/usr/bin/env bats
# sf-run --draft: speculative decoding. Greedy, the text is plain
# decoding's whatever the draft (a model directory, an image, the image
# itself at a lower budget), --draft-max, adaptive or fixed, the budget
# and the cache; a draft whose tokenizer differs is refused by name; the
# figures of --stats. The embedded mix4-1m drafts for its own images;
# ../shared's mix4-1m drafts for mix4-5m images. The sampling rule is
# tests/unit/test_speculative.c's.

load helpers

setup_file() {
	file_scratch sf-run-draft
	export CORPUS=$SF_ROOT/man/sf-run.1
	"$SF_BIN/sf-encode" --model "$MODEL" --method scalar -t 2 -q -o "$D/codes.sfq"
	"$SF_BIN/sf-encode" --model "$MODEL" --calibrate --codes "$D/codes.sfq" -t 2 -q \
		--corpus "$CORPUS" --budgets 0.5,0.2 --calib-tokens 8 --window 8 -o "$D/calib.json"
	"$SF_BIN/sf-pack" --model "$MODEL" -q -o "$D/id.sfimg"
	"$SF_BIN/sf-pack" --model "$MODEL" --codes "$D/codes.sfq" --calib "$D/calib.json" -q \
		-o "$D/cal.sfimg"
	export PROMPT="In the beginning"
	probe_direct "$D/id.sfimg"
}

teardown_file() {
	rm -rf "$D"
}

gen() { sf-run -p "$PROMPT" -n 40 --temp 0 -q "$@"; }

@test "usage errors exit 2 with one line" {
	run sf-run --model "$MODEL" --draft-max 4 -p x
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --draft-max, --draft-min, --draft-p-min, --draft-fixed, --draft-budget and --threads-draft need --draft" ]
	run sf-run --model "$MODEL" --draft "$MODEL" --threads-draft 0 -p x
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --threads-draft: 0 is out of range: expected 1..256" ]
	run sf-run --model "$MODEL" --draft "$MODEL" --ppl "$CORPUS"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --draft and --ppl cannot be combined" ]
	run sf-run --model "$MODEL" --draft "$MODEL" -cnv
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --draft and --conversation cannot be combined" ]
	run sf-run --model "$MODEL" --draft "$MODEL" --draft-max 4 --draft-min 5 -p x
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --draft-min 5: more than --draft-max 4" ]
	run sf-run --model "$MODEL" --draft "$MODEL" --draft-budget 0.5 -p x
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --draft-budget needs a draft image, not a model directory or GGUF" ]
	run sf-run --model "$MODEL" --draft "$MODEL" --draft-max 0 -p x
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --draft-max: 0 is out of range: expected 1..256" ]
	run sf-run --model "$MODEL" --draft "$MODEL" --draft-p-min 1.5 -p x
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "sf-run: --draft-p-min: 1.5 is out of range"* ]]
}

@test "a draft whose tokenizer differs is refused by name" {
	local m
	m=$(copy_model)
	jq -c '.model.vocab.ic = 301 | .model.vocab.ion = 300' "$MODEL/tokenizer.json" > "$m/tokenizer.json"
	run --separate-stderr sf-run --model "$MODEL" --draft "$m" -p "$PROMPT" -n 4
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $m: the draft's tokenizer differs from $MODEL's: token 300 is 'ion' against 'ic'" ]
	[ -z "$output" ]
}

@test "a missing draft is one line, exit 1" {
	run --separate-stderr sf-run --model "$MODEL" --draft "$D/none.sfimg" -p x
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-run: $D/none.sfimg: "* ]]
	[ "${#stderr_lines[@]}" -eq 1 ]
}

@test "greedy from --model: the text without a draft, at every --draft-max" {
	local want
	want=$(gen --model "$MODEL")
	for n in 1 2 5 8; do
		run gen --model "$MODEL" --draft "$MODEL" --draft-max "$n" --threads-draft 2
		[ "$output" = "$want" ]
		run gen --model "$MODEL" --draft "$D/cal.sfimg" --draft-budget 0.2 --draft-max "$n" --draft-fixed --draft-p-min 0
		[ "$output" = "$want" ]
	done
}

@test "greedy from an image: self-speculation, budgets 1 and 0.5, cache, -b, prefetch, head on flash, --simulate" {
	need_direct
	local want
	for b in 1 0.5; do
		want=$(gen --budget "$b" "$D/cal.sfimg")
		[ -n "$want" ]
		for n in 1 3 8; do
			run gen --budget "$b" --draft "$D/cal.sfimg" --draft-budget 0.2 --draft-max "$n" "$D/cal.sfimg"
			[ "$output" = "$want" ]
			run gen --budget "$b" --draft "$MODEL" --draft-max "$n" --draft-fixed --cache-ratio 0.3 "$D/cal.sfimg"
			[ "$output" = "$want" ]
		done
		run gen --budget "$b" --draft "$D/id.sfimg" -b 2 --prefetch 2 --prefetch-predict all "$D/cal.sfimg"
		[ "$output" = "$want" ]
		run gen --budget "$b" --draft "$MODEL" --head-on-flash "$D/cal.sfimg"
		[ "$output" = "$want" ]
		run gen --budget "$b" --draft "$D/cal.sfimg" --draft-budget 0.5 --simulate "$D/cal.sfimg"
		[ "$output" = "$want" ]
	done
}

@test "the context and -n bound the proposals" {
	need_direct
	local want
	for c in 9 10 13; do
		want=$(gen -c "$c" -n -1 "$D/id.sfimg")
		run gen -c "$c" -n -1 --draft "$MODEL" --draft-fixed --draft-p-min 0 "$D/id.sfimg"
		[ "$output" = "$want" ]
	done
	for n in 0 1 2 3; do
		want=$(sf-run -p "$PROMPT" -n "$n" --temp 0 -q "$D/id.sfimg")
		run sf-run -p "$PROMPT" -n "$n" --temp 0 -q --draft "$MODEL" --draft-fixed "$D/id.sfimg"
		[ "$output" = "$want" ]
	done
}

@test "--stats: proposals, acceptance, tokens per pass, bytes per token, draft time" {
	need_direct
	run --separate-stderr gen --draft "$D/cal.sfimg" --draft-budget 0.2 --stats - "$D/id.sfimg"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.speculative | .draft_max == 8 and .draft_min == 0
		and .draft_p_min == 0 and .adaptive and .passes > 0
		and .accepted <= .proposed and .acceptance_rate <= 1
		and .tokens_per_pass >= 1 and .draft_seconds >= 0 and .draft_bytes > 0'
	# every pass gives its own token and the proposals it accepted
	echo "$output" | jq -e '.speculative.accepted + .speculative.passes == .decode_tokens - 1'
	echo "$output" | jq -e '.decode_bytes_per_token > 0'
}

@test "sampling: a fixed seed gives the same text, another seed another; from an image too" {
	local a b c
	a=$(sf-run --model "$MODEL" -p "$PROMPT" -n 40 -q --seed 3 --top-k 40 --repeat-penalty 1.1 --draft "$MODEL")
	b=$(sf-run --model "$MODEL" -p "$PROMPT" -n 40 -q --seed 3 --top-k 40 --repeat-penalty 1.1 --draft "$MODEL")
	c=$(sf-run --model "$MODEL" -p "$PROMPT" -n 40 -q --seed 4 --top-k 40 --repeat-penalty 1.1 --draft "$MODEL")
	[ -n "$a" ]
	[ "$a" = "$b" ]
	[ "$a" != "$c" ]
	need_direct
	a=$(sf-run -p "$PROMPT" -n 40 -q --min-p 0.05 --draft "$D/cal.sfimg" --draft-budget 0.2 --budget 0.5 "$D/cal.sfimg")
	b=$(sf-run -p "$PROMPT" -n 40 -q --min-p 0.05 --draft "$D/cal.sfimg" --draft-budget 0.2 --budget 0.5 "$D/cal.sfimg")
	[ -n "$a" ]
	[ "$a" = "$b" ]
}

@test "mix4-1m drafts for a mix4-5m image: greedy text unchanged at budget 1 and TEAL 0.5, cache on and off" {
	need_shared
	need_direct
	local m5=$SF_SHARED/models/mix4-5m m1=$SF_SHARED/models/mix4-1m want
	sf-pack --model "$m5" -q -o "$D/id5.sfimg"
	sf-pack --model "$m1" -q -o "$D/id1.sfimg"
	for sel in "--budget 1" "--density 0.5"; do
		want=$(gen $sel "$D/id5.sfimg")
		for n in 3 16; do
			run gen $sel --draft "$m1" --draft-max "$n" "$D/id5.sfimg"
			[ "$output" = "$want" ]
		done
		run gen $sel --draft "$D/id1.sfimg" --draft-fixed --cache-ratio 0.2 "$D/id5.sfimg"
		[ "$output" = "$want" ]
	done
	rm -f "$D"/id5.sfimg "$D"/id1.sfimg
}
