#!/usr/bin/env bats
# sf-place: placements of planted-cluster statistics (tests/fixtures/
# mkplanted) are permutations, deterministic, and coact beats identity and
# frequency on held-out read length; --eval; a random Mixtral's experts
# placed and evaluated against a recount (tests/oracle/recount.py); bad
# input.

load helpers

setup_file() {
	export D=$BATS_FILE_TMPDIR
	"$SF_FIXTURES/mkplanted" "$MODEL" 2000 1 "$D/prof.sft" "$D/prof.sfc"
	"$SF_FIXTURES/mkplanted" "$MODEL" 500 2 "$D/test.sft"
	for m in identity frequency coact; do
		"$SF_BIN/sf-place" -q --method "$m" "$D/prof.sfc" -o "$D/$m.json"
	done
}

# 0 when every group's perm is a permutation of 0..entries-1
is_permutation() {
	jq -e '[.groups[] | (.perm | sort) == [range(.entries)]] | all' "$1" >/dev/null
}

@test "--help prints usage with an example and exits 0" {
	run sf-place --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"Usage: sf-place"* ]]
	[[ "$output" == *"Examples:"* ]]
}

@test "--version prints the version" {
	run sf-place --version
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^sf-place\ \(sparseflash\)\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
}

@test "usage errors exit 2" {
	run sf-place
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-place: a COACT.sfc is required" ]
	run sf-place --method random "$D/prof.sfc"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-place: --method: 'random' is not identity, frequency or coact" ]
	run sf-place --exact --topk 4 "$D/prof.sfc"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-place: --exact and --topk cannot be combined" ]
	run sf-place --method frequency --topk 4 "$D/prof.sfc"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-place: --exact and --topk apply to --method coact only" ]
	run sf-place --topk 0 "$D/prof.sfc"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-place: --topk: 0 is out of range: expected 1..4096" ]
	run sf-place --eval "$D/test.sft"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-place: --eval needs at least one PLACEMENT.json" ]
	run sf-place --layers 3-1 "$D/prof.sfc"
	[ "$status" -eq 2 ]
}

@test "-o naming the COACT.sfc is refused, exit 1, the input unchanged" {
	local in=$BATS_TEST_TMPDIR/in.sfc sum
	cp "$D/prof.sfc" "$in"
	sum=$(md5sum <"$in")
	run --separate-stderr sf-place -q "$in" -o "$in"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $in: is also an input ($in): refusing to overwrite it" ]
	[ "$(md5sum <"$in")" = "$sum" ]
}

@test "-o /dev/null and a FIFO are written to: /dev/null stays a character device" {
	sf-place -q "$D/prof.sfc" -o "$BATS_TEST_TMPDIR/want.json"
	run --separate-stderr sf-place -q "$D/prof.sfc" -o /dev/null
	[ "$status" -eq 0 ]
	[ -c /dev/null ]
	mkfifo "$BATS_TEST_TMPDIR/fifo"
	cat "$BATS_TEST_TMPDIR/fifo" > "$BATS_TEST_TMPDIR/got.json" &
	sf-place -q "$D/prof.sfc" -o "$BATS_TEST_TMPDIR/fifo"
	wait
	[ -p "$BATS_TEST_TMPDIR/fifo" ]
	cmp "$BATS_TEST_TMPDIR/want.json" "$BATS_TEST_TMPDIR/got.json"
}

@test "--layers: a number too large to read is out of range, not clamped" {
	run --separate-stderr sf-place --layers 99999999999999999999 "$D/prof.sfc"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-place: --layers: layer 99999999999999999999 is out of range: expected 0..4095" ]
	[ "${stderr_lines[1]}" = "Try 'sf-place --help'." ]
}

@test "every method gives a permutation of every group, with its method and cost" {
	for m in identity frequency coact; do
		is_permutation "$D/$m.json"
		[ "$(jq -r '[.groups[].method] | unique | join(",")' "$D/$m.json")" = "$m" ]
		[ "$(jq '.groups | length' "$D/$m.json")" -eq 16 ]
		jq -e '.groups | all(.predicted_runs_per_token > 0 and .tokens == 2000)' "$D/$m.json"
	done
	[ "$(jq -r .fingerprint "$D/coact.json")" = "$(jq -r .fingerprint "$D/identity.json")" ]
	jq -e '.groups[0].perm == [range(128)]' "$D/identity.json"
}

@test "placements are deterministic, for any thread count" {
	sf-place -q -t 1 "$D/prof.sfc" -o "$BATS_TEST_TMPDIR/a.json"
	sf-place -q -t 2 "$D/prof.sfc" -o "$BATS_TEST_TMPDIR/b.json"
	cmp "$D/coact.json" "$BATS_TEST_TMPDIR/a.json"
	cmp "$D/coact.json" "$BATS_TEST_TMPDIR/b.json"
	sf-place -q -t 1 --topk 4 "$D/prof.sfc" -o "$BATS_TEST_TMPDIR/c.json"
	sf-place -q -t 2 --topk 4 "$D/prof.sfc" -o "$BATS_TEST_TMPDIR/d.json"
	cmp "$BATS_TEST_TMPDIR/c.json" "$BATS_TEST_TMPDIR/d.json"
	is_permutation "$BATS_TEST_TMPDIR/c.json"
	jq -e '.groups[0].options == {"search": "topk", "topk": 4, "finish": 1024}' "$BATS_TEST_TMPDIR/c.json"
	jq -e '.groups[0].options == {"search": "exact"}' "$D/coact.json"
}

@test "coact beats identity and frequency on held-out read length and runs" {
	run --separate-stderr sf-place --eval "$D/test.sft" --json --model "$MODEL" \
		"$D/identity.json" "$D/frequency.json" "$D/coact.json"
	[ "$status" -eq 0 ]
	echo "$output" >"$BATS_TEST_TMPDIR/eval.json"
	local id fr co
	for m in 0 1 2; do
		jq -e ".placements[$m].groups | length == 16" "$BATS_TEST_TMPDIR/eval.json"
	done
	# per group: coact's mean read length at least twice the others'
	jq -e '[range(16) as $g | .placements as $p |
		($p[2].groups[$g].mean_read_length > 2 * $p[0].groups[$g].mean_read_length) and
		($p[2].groups[$g].mean_read_length > 2 * $p[1].groups[$g].mean_read_length) and
		($p[2].groups[$g].runs_per_token < $p[1].groups[$g].runs_per_token)] | all' \
		"$BATS_TEST_TMPDIR/eval.json"
	# bytes: 128-dim bf16 down column = 256 bytes; collapse never reads fewer bytes
	jq -e '.placements[2].groups[3] | .entry_bytes == 256 and
		(.collapse | map(.bytes_per_token) | . == sort)' "$BATS_TEST_TMPDIR/eval.json"
}

@test "--eval prints a table with one row per group and placement, from stdin too" {
	run --separate-stderr sf-place --eval - "$D/identity.json" "$D/coact.json" <"$D/test.sft"
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "layer group"*"runs/tok read_len"*"KiB/tok@16" ]]
	[ "${#lines[@]}" -eq $((1 + 16 * 2 + 2)) ]
	[[ "${lines[1]}" == "0     attn_in     128 identity.json "* ]]
	[[ "${lines[2]}" == "0     attn_in     128 coact.json "* ]]
	[[ "${lines[-1]}" == "all "*"coact.json"* ]]
}

@test "--max-memory refuses a search that needs more, with the figure" {
	run --separate-stderr sf-place --exact --max-memory 1K "$D/prof.sfc" -o "$BATS_TEST_TMPDIR/x.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-place: $D/prof.sfc: layer 0 attn_in: the exact greedy needs "*" bytes for 128 entries, over --max-memory (1024 bytes): use --topk" ]]
	# nothing written, not even a temporary file
	! ls "$BATS_TEST_TMPDIR"/x.json*
}

@test "--layers restricts the groups placed" {
	sf-place -q --layers 1-2 "$D/prof.sfc" -o "$BATS_TEST_TMPDIR/l.json"
	[ "$(jq -c '[.groups[].layer] | unique' "$BATS_TEST_TMPDIR/l.json")" = "[1,2]" ]
	run --separate-stderr sf-place --eval "$D/test.sft" "$BATS_TEST_TMPDIR/l.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $BATS_TEST_TMPDIR/l.json: no permutation for layer 0 attn_in of $D/test.sft" ]
}

@test "a duplicated index in a hand-edited placement is refused by name" {
	local f=$BATS_TEST_TMPDIR/dup.json a b
	jq -c '.groups[1].perm[5] = .groups[1].perm[2]' "$D/coact.json" >"$f"
	a=$(jq '.groups[1].perm[2]' "$D/coact.json")
	b=$(jq '.groups[1].perm[5]' "$D/coact.json")
	run --separate-stderr sf-place --eval "$D/test.sft" "$f"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $f: layer 0 attn_out: index $a at positions 2 and 5, index $b missing" ]
}

@test "a missing index is refused by name" {
	local f=$BATS_TEST_TMPDIR/miss.json b
	jq -c 'del(.groups[3].perm[7])' "$D/coact.json" >"$f"
	b=$(jq '.groups[3].perm[7]' "$D/coact.json")
	run --separate-stderr sf-place --eval "$D/test.sft" "$f"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $f: layer 0 ffn_out: index $b missing (383 indices for 384 entries)" ]
	jq -c '.groups[3].perm[7] = 384' "$D/coact.json" >"$f"
	run --separate-stderr sf-place --eval "$D/test.sft" "$f"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $f: layer 0 ffn_out: perm[7] is not an index in 0..383" ]
}

@test "a placement whose shape does not match the trace is refused" {
	local f=$BATS_TEST_TMPDIR/shape.json
	jq -c '.groups[0].entries = 127 | .groups[0].perm = [range(127)]' "$D/coact.json" >"$f"
	run --separate-stderr sf-place --eval "$D/test.sft" "$f"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $f: layer 0 attn_in: 127 entries, $D/test.sft has 128" ]
}

@test "a placement file that is not one is refused" {
	local f=$BATS_TEST_TMPDIR/bad.json
	echo '{"format": "something"}' >"$f"
	run --separate-stderr sf-place --eval "$D/test.sft" "$f"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $f: not a placement: \"format\" is not \"sparseflash-placement\"" ]
	echo '{"format": ' >"$f"
	run --separate-stderr sf-place --eval "$D/test.sft" "$f"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-place: $f: line "* ]]
}

@test "statistics, traces and placements of another model are refused" {
	need_shared
	local other=$SF_SHARED/models/mix4-5m fp1 fp5
	"$SF_FIXTURES/mkplanted" "$other" 20 3 "$BATS_TEST_TMPDIR/o.sft" "$BATS_TEST_TMPDIR/o.sfc"
	fp1=$(jq -r .shape_fingerprint "$D/coact.json")
	fp5=$(sf-place -q --method identity "$BATS_TEST_TMPDIR/o.sfc" | jq -r .shape_fingerprint)
	run --separate-stderr sf-place --model "$MODEL" "$BATS_TEST_TMPDIR/o.sfc" -o "$BATS_TEST_TMPDIR/p.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $BATS_TEST_TMPDIR/o.sfc: statistics of another model than $MODEL/model.safetensors: shape fingerprint $fp5, expected $fp1" ]
	[ ! -e "$BATS_TEST_TMPDIR/p.json" ]
	run --separate-stderr sf-place --eval "$BATS_TEST_TMPDIR/o.sft" "$D/coact.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $D/coact.json: placement of another model than $BATS_TEST_TMPDIR/o.sft: shape fingerprint $fp1, expected $fp5" ]
	run --separate-stderr sf-place --eval "$D/test.sft" --model "$other" "$D/coact.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-place: $D/test.sft: trace of another model than $other/model.safetensors: shape fingerprint $fp1, expected $fp5" ]
}

@test "real statistics: coact on mix4-1m's own activations beats identity" {
	command -v sf-profile >/dev/null && command -v sf-coact >/dev/null ||
		skip "sf-profile or sf-coact not built yet"
	need_shared
	local t=$BATS_TEST_TMPDIR
	sf-profile --model "$MODEL" --density 0.1 --max-tokens 1500 "$SF_SHARED/data/mix4/kjv.profile.txt" |
		sf-coact -o "$t/real.sfc"
	sf-profile --model "$MODEL" --density 0.1 --max-tokens 500 "$SF_SHARED/data/mix4/kjv.test.txt" \
		-o "$t/real.sft"
	sf-place -q --method identity "$t/real.sfc" -o "$t/id.json"
	sf-place -q "$t/real.sfc" -o "$t/co.json"
	is_permutation "$t/co.json"
	sf-place --eval "$t/real.sft" --json "$t/id.json" "$t/co.json" >"$t/eval.json"
	jq -e '[.placements[] | [.groups[].runs_per_token] | add] | .[1] < .[0]' "$t/eval.json"
}

@test "a write error on standard output is reported once" {
	stdout_full_once "sf-place: (stdout): write failed: No space left on device" \
		sf-place -q "$D/prof.sfc"
}

@test "-v states the memory before placing: statistics a group at a time, the search" {
	run --separate-stderr sf-place -v --method coact "$D/prof.sfc" -o "$BATS_TEST_TMPDIR/c.json"
	[ "$status" -eq 0 ]
	[[ "${stderr_lines[0]}" =~ ^"sf-place: memory: about "[0-9.]+" MiB: the statistics a group at a time, the largest group's search"$ ]]
}

@test "a mixture's experts: every method a permutation of the experts, --eval's runs per token of them equal a recount of the trace, the bytes whole experts; sf-pack lays them in its order, the nll the same" {
	local m want t=$BATS_TEST_TMPDIR python=${SF_PYTHON:-python3}
	"$SF_FIXTURES/mkmodel" -o "$t/mix" --arch mixtral --experts 4 --experts-used 2 --layers 2 \
		--hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 1024 --seed 3 \
		--tokenizer "$MODEL" >/dev/null
	head -c 3000 "$SF_ROOT/man/sf-place.1" >"$t/text.txt"
	sf-profile -q -m "$t/mix" --groups experts "$t/text.txt" -o "$t/mix.sft"
	sf-coact -q "$t/mix.sft" -o "$t/mix.sfc"
	for m in identity frequency coact; do
		sf-place -q --method $m "$t/mix.sfc" -o "$t/$m.json"
		is_permutation "$t/$m.json"
		jq -e '[.groups[] | .group == "experts" and .entries == 4] == [true, true]' "$t/$m.json"
	done
	run sf-place --eval "$t/mix.sft" --model "$t/mix" --json "$t/identity.json" "$t/coact.json"
	[ "$status" -eq 0 ]
	echo "$output" >"$t/eval.json"
	# 2 experts a token, each a record of gate, up and down: 3 x 96 x 64 BF16
	jq -e '[.placements[].groups[] | .active_per_token == 2 and .entry_bytes == 36864 and
		.collapse[0].bytes_per_token == 2 * 36864] | all' "$t/eval.json"
	command -v "$python" >/dev/null || skip "no $python: the recount is in Python"
	for m in identity coact; do
		[ "$(jq -c --arg p "$t/$m.json" '[.placements[] | select(.placement == $p) |
			.groups[].runs_per_token]' "$t/eval.json")" = \
		  "$("$python" "$SF_ROOT/tests/oracle/recount.py" --runs "$t/mix.sft" "$t/$m.json" |
			jq -c '[.[].runs_per_token]')" ]
	done
	# the image in the placement's order (here each layer's reversed):
	# the same nll as in id order
	jq '.groups[].perm |= reverse' "$t/identity.json" >"$t/reversed.json"
	sf-pack -q --model "$t/mix" -o "$t/id.sfimg"
	sf-pack -q --model "$t/mix" --placement "$t/reversed.json" -o "$t/mix.sfimg"
	sf-pack --info "$t/id.sfimg" | jq -e '.experts.placed == false'
	sf-pack --info "$t/mix.sfimg" | jq -e '.experts.placed == true'
	sf-pack --verify "$t/mix.sfimg"
	want=$(sf-run -q --ppl "$t/text.txt" --max-tokens 64 "$t/id.sfimg" | jq .nll)
	[ "$(sf-run -q --ppl "$t/text.txt" --max-tokens 64 "$t/mix.sfimg" | jq .nll)" = "$want" ]
	[ "$(sf-run -q --ppl "$t/text.txt" --max-tokens 64 --ram 64M "$t/mix.sfimg" | jq .nll)" = "$want" ]
}
