#!/usr/bin/env bats
# sf-encode: middle-tier codes (.sfq), merging, --info, --calibrate, and
# bad input.

load helpers

setup() {
	T=$BATS_TEST_TMPDIR
}

info() { sf-encode --info "$1"; }

@test "--help prints usage with an example and exits 0" {
	run sf-encode --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"Usage: sf-encode --model MODEL"* ]]
	[[ "$output" == *"Examples:"* ]]
}

@test "--version prints the version" {
	run sf-encode --version
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^sf-encode\ \(sparseflash\)\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
}

@test "an unknown option is a usage error" {
	run sf-encode --frobnicate
	[ "$status" -eq 2 ]
	[ "${lines[-1]}" = "Try 'sf-encode --help'." ]
}

@test "an unknown method is one error line, exit 1" {
	run --separate-stderr sf-encode --model "$MODEL" --method lattice -o "$T/x.sfq"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-encode: --method: unknown method 'lattice': expected trellis or scalar" ]
	[ ! -e "$T/x.sfq" ]
}

@test "a budget outside (0, 1] is one error line, exit 1" {
	local b
	for b in 0 1.5 -0.1; do
		run --separate-stderr sf-encode --model "$MODEL" --calibrate --corpus /dev/null --budgets "0.5,$b" -o "$T/c.json"
		[ "$status" -eq 1 ]
		[ "$stderr" = "sf-encode: --budgets: $b is not a budget in (0, 1]" ]
		[ ! -e "$T/c.json" ]
	done
}

@test "a budget that is not a number is a usage error" {
	run --separate-stderr sf-encode --model "$MODEL" --calibrate --corpus /dev/null --budgets 0.5,half -o "$T/c.json"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-encode: --budgets: half is not a budget in (0, 1]" ]
	[ "${stderr_lines[1]}" = "Try 'sf-encode --help'." ]
}

@test "--layers and --dense-layers take the one layers grammar" {
	sf-encode --model "$MODEL" --method scalar --layers 1:1 --groups attn_out -o "$T/fl.sfq"
	[ "$(sf-encode --info "$T/fl.sfq" | jq -c '[.sections[].layer]')" = "[0,3]" ]
	run --separate-stderr sf-encode --model "$MODEL" --layers 0-x -o "$T/x.sfq"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-encode: --layers: '0-x' is not a list of layers: expected N, N-M (N <= M), F:L, all or none, comma separated" ]
	run --separate-stderr sf-encode --model "$MODEL" --layers 99999999999999999999 -o "$T/x.sfq"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-encode: --layers: layer 99999999999999999999 is out of range: the model has layers 0..3" ]
}

@test "--merge refuses an output that is one of its inputs" {
	sf-encode --model "$MODEL" --method scalar --layers 0 --groups attn_out -o "$T/m.sfq"
	local sum
	sum=$(md5sum <"$T/m.sfq")
	run --separate-stderr sf-encode --merge "$T/m.sfq" -o "$T/m.sfq"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-encode: $T/m.sfq: is also an input ($T/m.sfq): refusing to overwrite it" ]
	[ "$(md5sum <"$T/m.sfq")" = "$sum" ]
}

@test "a layer out of range is a usage error" {
	run --separate-stderr sf-encode --model "$MODEL" --layers 2-4 -o "$T/x.sfq"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-encode: --layers: layer 4 is out of range: the model has layers 0..3" ]
}

@test "trellis codes of one group: header, sections and the error on stderr" {
	run --separate-stderr sf-encode --model "$MODEL" --layers 0 --groups attn_out -o "$T/a.sfq" --stats "$T/s.json"
	[ "$status" -eq 0 ]
	run info "$T/a.sfq"
	[ "$status" -eq 0 ]
	[ "$(jq -r .method <<<"$output")" = trellis ]
	[ "$(jq -r '.sections | length' <<<"$output")" = 1 ]
	[ "$(jq -r '.sections[0].group' <<<"$output")" = attn_out ]
	# 128 entries of one column of 128 rows: 2 scale bytes + 32 code bytes
	[ "$(jq -r '.sections[0].bytes' <<<"$output")" = $((128 * 34)) ]
	rel=$(jq -r '.[0].relative' "$T/s.json")
	awk -v r="$rel" 'BEGIN { exit !(r > 0.05 && r < 0.10) }'
}

@test "encoding is deterministic and the same at -t 1 and -t 2" {
	sf-encode --model "$MODEL" --method scalar -t 1 -o "$T/a.sfq"
	sf-encode --model "$MODEL" --method scalar -t 2 -o "$T/b.sfq"
	cmp "$T/a.sfq" "$T/b.sfq"
}

@test "layer-split encodes merge into the full encode" {
	sf-encode --model "$MODEL" --method scalar -o "$T/all.sfq"
	sf-encode --model "$MODEL" --method scalar --layers 2-3 -o "$T/b.sfq"
	sf-encode --model "$MODEL" --method scalar --layers 0,1 -o "$T/a.sfq"
	run --separate-stderr sf-encode --merge "$T/b.sfq" "$T/a.sfq" -o "$T/m.sfq"
	[ "$status" -eq 0 ]
	[ "$(info "$T/m.sfq" | jq -c '.sections')" = "$(info "$T/all.sfq" | jq -c '.sections')" ]
}

@test "codes stream through a pipe" {
	run bash -c 'sf-encode --model "$1" --method scalar --groups ffn_out -o - | sf-encode --info - | jq -r ".sections | length"' _ "$MODEL"
	[ "$status" -eq 0 ]
	[ "$output" = 4 ]
}

@test "a truncated .sfq is refused and --merge leaves no output" {
	sf-encode --model "$MODEL" --method scalar --layers 0 -o "$T/a.sfq"
	head -c 9000 "$T/a.sfq" >"$T/cut.sfq"
	run --separate-stderr sf-encode --info "$T/cut.sfq"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" == "sf-encode: $T/cut.sfq: layer 0 attn_in: "*"(truncated?)" ]]
	run --separate-stderr sf-encode --merge "$T/a.sfq" "$T/cut.sfq" -o "$T/out.sfq"
	[ "$status" -eq 1 ]
	[ ! -e "$T/out.sfq" ]
	[ -z "$(ls "$T" | grep tmp)" ]
}

@test "a file that is not a .sfq is refused" {
	run --separate-stderr sf-encode --info "$MODEL/config.json"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-encode: $MODEL/config.json: not a .sfq file (bad magic)" ]
}

@test "an unknown method in a .sfq header is refused" {
	sf-encode --model "$MODEL" --method scalar --layers 0 --groups attn_out -o "$T/a.sfq"
	sed 's/"method":"scalar"/"method":"lattic"/' "$T/a.sfq" >"$T/bad.sfq"
	run --separate-stderr sf-encode --info "$T/bad.sfq"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-encode: $T/bad.sfq: header: unknown method lattic" ]
}

@test "codes of another model are refused" {
	"$SF_FIXTURES/mkmodel" -o "$T/other" --hidden 64 --intermediate 128 --layers 2 --tokenizer "$MODEL" >/dev/null
	sf-encode --model "$T/other" --method scalar -o "$T/other.sfq"
	fo=$(info "$T/other.sfq" | jq -r .fingerprint)
	sf-encode --model "$MODEL" --method scalar --layers 0 -o "$T/a.sfq"
	fm=$(info "$T/a.sfq" | jq -r .fingerprint)
	run --separate-stderr sf-encode --model "$MODEL" --calibrate --codes "$T/other.sfq" --corpus "$MODEL/config.json" --budgets 0.5 -o "$T/c.json"
	[ "$status" -eq 1 ]
	so=$(info "$T/other.sfq" | jq -r .shape_fingerprint)
	sm=$(info "$T/a.sfq" | jq -r .shape_fingerprint)
	[ "${stderr_lines[0]}" = "sf-encode: $T/other.sfq: codes of another model than $MODEL/model.safetensors: shape fingerprint $so, expected $sm" ]
	[ ! -e "$T/c.json" ]
	run --separate-stderr sf-encode --merge "$T/a.sfq" "$T/other.sfq" -o "$T/m.sfq"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-encode: $T/other.sfq: codes of another model than $T/a.sfq: shape fingerprint $so, expected $sm" ]
	[ ! -e "$T/m.sfq" ]
}

@test "--calibrate writes tier sizes that add up to each budget" {
	need_shared
	run --separate-stderr sf-encode --model "$MODEL" --calibrate --method scalar \
		--corpus "$SF_SHARED/data/mix4/kjv.calib.txt" --corpus "$SF_SHARED/data/mix4/man.calib.txt" \
		--budgets 0.5,0.8 --calib-tokens 32 --window 16 --dense-layers 0,2-3 -o "$T/c.json"
	[ "$status" -eq 0 ]
	[ "$(jq -r '.budgets | length' "$T/c.json")" = 2 ]
	[ "$(jq -r '.budgets[0].layers[0].dense' "$T/c.json")" = true ]
	[ "$(jq -r '.budgets[0].layers[0].groups.ffn_out.k_top' "$T/c.json")" = 384 ]
	# layer 1 realised budget within rounding of the target, below it
	jq -e '.budgets[] | .budget as $b | .layers[1].budget | (. <= $b + 1e-9 and . > $b - 0.01)' "$T/c.json" >/dev/null
	# Equation 5 from the k's and the group sizes
	jq -e '.groups as $s | .budgets[].layers[1].groups | to_entries | all(.value.budget - ((.value.k_top * $s[.key].top_bytes + .value.k_mid * $s[.key].mid_bytes) / ($s[.key].entries * $s[.key].top_bytes)) | fabs < 1e-9)' "$T/c.json" >/dev/null
	# more budget, less error
	jq -e '.budgets[0].layers[1].error > .budgets[1].layers[1].error' "$T/c.json" >/dev/null
}

@test "--calibrate --dtype q4: sizes in q4 bytes, Equation 5 of them; sf-pack takes them for q4 only" {
	need_shared
	sf-encode -q --model "$MODEL" --method scalar -o "$T/codes.sfq"
	run --separate-stderr sf-encode --model "$MODEL" --calibrate --codes "$T/codes.sfq" \
		--corpus "$SF_SHARED/data/mix4/kjv.calib.txt" --budgets 0.5 --calib-tokens 16 \
		--window 16 --dense-layers 0,3 --dtype q4 --quant search -o "$T/q4.json"
	[ "$status" -eq 0 ]
	# mix4-1m: ffn_out columns of 128 rows, 4 blocks of 18 bytes
	[ "$(jq .groups.ffn_out.top_bytes "$T/q4.json")" = 72 ]
	[ "$(jq -r .producer.options.dtype,.producer.options.quant "$T/q4.json" | tr '\n' ' ')" = "q4 search " ]
	jq -e '.groups as $s | .budgets[].layers[1].groups | to_entries | all(.value.budget - ((.value.k_top * $s[.key].top_bytes + .value.k_mid * $s[.key].mid_bytes) / ($s[.key].entries * $s[.key].top_bytes)) | fabs < 1e-9)' "$T/q4.json" >/dev/null
	sf-pack --model "$MODEL" --codes "$T/codes.sfq" --calib "$T/q4.json" --dtype q4 -o "$T/q4.sfimg"
	run --separate-stderr sf-pack --model "$MODEL" --codes "$T/codes.sfq" --calib "$T/q4.json" -o "$T/bf.sfimg"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-pack: $T/q4.json: attn_in: budgets of 144 top-tier bytes an entry, the image's BF16 top tier has 512 (sf-encode --calibrate --dtype as sf-pack's)" ]
	[ ! -e "$T/bf.sfimg" ]
}

@test "--dtype and --quant: bad values and misuse are usage errors" {
	run --separate-stderr sf-encode --model "$MODEL" --calibrate --corpus x --budgets 0.5 --dtype bf16 -o c.json
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-encode: --dtype: 'bf16' is not keep, q8 or q4" ]
	run --separate-stderr sf-encode --model "$MODEL" --calibrate --corpus x --budgets 0.5 --quant search -o c.json
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-encode: --quant applies to --dtype q8 or q4" ]
	run --separate-stderr sf-encode --model "$MODEL" --calibrate --corpus x --budgets 0.5 --dtype q8 --quant best -o c.json
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-encode: --quant: 'best' is not rtn or search" ]
	run --separate-stderr sf-encode --model "$MODEL" --dtype q4 -o c.sfq
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-encode: --corpus, --budgets, --codes, --dense-layers, --dtype and --quant need --calibrate" ]
}

# calibration of the layers LIST alone (a part) into OUT, or of every layer
calib_part() {
	local out=$1
	shift
	sf-encode -q --model "$MODEL" --calibrate --codes "$T/codes.sfq" \
		--corpus "$SF_SHARED/data/mix4/kjv.calib.txt" --budgets 0.6 --calib-tokens 8 \
		--window 8 --dense-layers 3 -t 1 -o "$out" "$@"
}

@test "--calibrate --layers: parts merged in any order equal one calibration byte for byte" {
	need_shared
	sf-encode --model "$MODEL" --method scalar -o "$T/codes.sfq"
	calib_part "$T/whole.json"
	calib_part "$T/p0.json" --layers 0
	calib_part "$T/p13.json" --layers 1,3
	calib_part "$T/p2.json" --layers 2
	[ "$(jq -c .part_layers "$T/p13.json")" = "[1,3]" ]
	[ "$(jq -c '[.budgets[].layers[].layer]' "$T/p13.json")" = "[1,3]" ]
	[ "$(jq '.budgets[0] | has("realised")' "$T/p13.json")" = false ]
	run --separate-stderr sf-encode --merge "$T/p2.json" "$T/p13.json" "$T/p0.json" -o "$T/m.json"
	[ "$status" -eq 0 ]
	cmp "$T/whole.json" "$T/m.json"
}

@test "calibration parts: a part is refused by sf-pack; overlaps, gaps and wholes by --merge" {
	need_shared
	sf-encode --model "$MODEL" --method scalar -o "$T/codes.sfq"
	calib_part "$T/whole.json"
	calib_part "$T/p01.json" --layers 0-1
	calib_part "$T/p12.json" --layers 1-2
	run --separate-stderr sf-pack --model "$MODEL" --codes "$T/codes.sfq" --calib "$T/p01.json" -o "$T/x.sfimg"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-pack: $T/p01.json: a part of a calibration (sf-encode --calibrate --layers): merge the parts with sf-encode --merge" ]
	run --separate-stderr sf-encode --merge "$T/p01.json" "$T/p12.json" -o "$T/m.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-encode: $T/p12.json: layer 1 is in $T/p01.json too" ]
	run --separate-stderr sf-encode --merge "$T/p01.json" -o "$T/m.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-encode: merge: no part holds layer 2" ]
	run --separate-stderr sf-encode --merge "$T/p01.json" "$T/whole.json" -o "$T/m.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-encode: $T/whole.json: a whole calibration, not a part (sf-encode --calibrate --layers)" ]
	calib_part "$T/p2.json" --layers 2-3 --window 4
	run --separate-stderr sf-encode --merge "$T/p01.json" "$T/p2.json" -o "$T/m.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-encode: $T/p2.json: other budgets, tokens or window than $T/p01.json" ]
	[ ! -e "$T/m.json" ]
}

@test "-o /dev/null is written to and stays a character device" {
	run --separate-stderr sf-encode --model "$MODEL" --method scalar -o /dev/null
	[ "$status" -eq 0 ]
	[ -c /dev/null ]
}

@test "--progress into a log: one line per update ended by a newline, a final line without ETA" {
	run --separate-stderr sf-encode --model "$MODEL" --method scalar --progress -o "$T/p.sfq"
	[ "$status" -eq 0 ]
	[[ "$stderr" != *$'\r'* ]]
	[[ "${stderr_lines[-1]}" =~ ^sf-encode:\ 16\ groups\ in\ [0-9.]+\ s,\ [0-9.e+]+\ groups/s$ ]]
	run --separate-stderr sf-encode -q --model "$MODEL" --method scalar --calibrate \
		--corpus "$MODEL/README.md" --budgets 0.5 --calib-tokens 16 --window 8 --progress -o "$T/c.json"
	[ "$status" -eq 0 ]
	[[ "${stderr_lines[-1]}" =~ ^sf-encode:\ [0-9]+\ configurations\ in\ [0-9.]+\ s,\ [0-9.e+]+\ configurations/s\;\ 4\ layers$ ]]
}

@test "--calibrate at a terminal: progress per step with rate, ETA and layer, a final line without ETA" {
	sf-encode -q --model "$MODEL" --method scalar -o "$T/s.sfq"
	script -qec "sf-encode --model '$MODEL' --codes '$T/s.sfq' --calibrate --corpus '$MODEL/README.md' \
		--budgets 0.3,0.5 --calib-tokens 256 --window 32 -o '$T/c.json'" /dev/null >"$T/tty"
	# one line rewritten in place: every update starts with \r and ends by erasing the rest
	local lines re=$'^sf-encode: [0-9]+ configurations, [0-9.e+]+ configurations/s, ETA [0-9]+ s; layer [1-4] of 4\e\\[K$'
	mapfile -t lines < <(tr '\r' '\n' <"$T/tty" | grep .)
	# at least two updates (0.5 s apart) and the final line: two budgets
	# of 256 tokens take 3 s on a fast machine (one of 128 took 1 s, too
	# few updates)
	[ "${#lines[@]}" -ge 3 ]
	for l in "${lines[@]:0:${#lines[@]}-1}"; do
		[[ "$l" =~ $re ]]
	done
	re=$'^sf-encode: [0-9]+ configurations in [0-9.]+ s, [0-9.e+]+ configurations/s; 4 layers\e\\[K$'
	[[ "${lines[-1]}" =~ $re ]]
	[ "$(tail -c 2 "$T/tty" | od -An -c | tr -d ' ')" = '\r\n' ]
}

@test "progress at a terminal: rewritten in place, ended by a newline; -q silences it" {
	script -qec "sf-encode --model '$MODEL' --method scalar -o '$T/p.sfq' >/dev/null" /dev/null >"$T/tty"
	local tty re=$'^\rsf-encode: 16 groups in [0-9.]+ s, [0-9.e+]+ groups/s\e\\[K\r?\n$'
	tty=$(cat "$T/tty"; echo .)
	[[ "${tty%.}" =~ $re ]]
	script -qec "sf-encode -q --model '$MODEL' --method scalar -o '$T/p.sfq'" /dev/null >"$T/tty"
	[ ! -s "$T/tty" ]
}

@test "SIGTERM removes the temporary output and ends with 143" {
	SF_REF=1 sf-encode --model "$MODEL" -t 1 --layers 0 -o "$T/k.sfq" 2>"$T/err" &
	local pid=$! status=0
	until compgen -G "$T/k.sfq.tmp.*" >/dev/null; do sleep 0.02; done
	kill -TERM $pid
	wait $pid || status=$?
	[ "$status" -eq 143 ]
	[ ! -s "$T/err" ]
	[ -z "$(compgen -G "$T/k.sfq*")" ]
}

@test "-o - : a write error on standard output is reported once" {
	stdout_full_once "sf-encode: (stdout): No space left on device" \
		sf-encode -q --model "$MODEL" --method scalar --layers 0 -o -
}

@test "-o \"\" and --model \"\" are usage errors" {
	run --separate-stderr sf-encode --model "$MODEL" -o ""
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-encode: --output: an empty name" ]
	run --separate-stderr sf-pack --model "" -o "$T/x.sfimg"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --model: an empty name" ]
}

@test "-v states the memory before encoding and before calibrating" {
	run --separate-stderr sf-encode -v --model "$MODEL" --method scalar -o "$BATS_TEST_TMPDIR/s.sfq"
	[ "$status" -eq 0 ]
	[[ "${stderr_lines[0]}" =~ ^"sf-encode: memory: about "[0-9.]+" MiB: the encoders, a group's codes, the weights a layer at a time (mapped)"$ ]]
	need_shared
	run --separate-stderr sf-encode -v --model "$MODEL" --calibrate --codes "$BATS_TEST_TMPDIR/s.sfq" \
		--corpus "$SF_SHARED/data/mix4/kjv.calib.txt" --budgets 0.3 --calib-tokens 16 -t 1 \
		-o "$BATS_TEST_TMPDIR/c.json"
	[ "$status" -eq 0 ]
	[ "${stderr_lines[0]}" = "sf-encode: calibrating on 16 tokens, 1 budgets" ]
	[[ "${stderr_lines[1]}" =~ ^"sf-encode: memory: about "[0-9.]+" MiB: the calibration, the codes, the weights (mapped)"$ ]]
}
