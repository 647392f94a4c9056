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
	"$SF_BIN/sf-pack" --model "$MODEL" -o "$D/plain.sfimg"
	"$SF_BIN/sf-profile" --model "$MODEL" --task man --max-tokens 60 -q "$SF_ROOT/man/sf-run.1" |
		"$SF_BIN/sf-coact" -q --scores "$D/task.json" -o /dev/null
	export CORPUS=$SF_ROOT/man/sf-run.1
}

# a copy of the model with one weight of layer 2's down_proj a bf16 NaN
# A copy of the model with weight 100 of layer 2's down_proj (bytes 200
# and 201, in the first block the weights fingerprint samples) set to the
# bf16 bytes BYTES (printf escapes).
changed_model() {
	local m f hl off
	m=$(copy_model)
	f=$m/model.safetensors
	hl=$(od -An -tu8 -N8 "$f" | tr -d ' ')
	off=$(dd if="$f" bs=4096 iflag=skip_bytes,count_bytes skip=8 count="$hl" status=none |
		jq '.["model.layers.2.mlp.down_proj.weight"].data_offsets[0]')
	printf "$1" | dd of="$f" bs=1 seek=$((8 + hl + off + 200)) conv=notrunc status=none
	echo "$m"
}

nan_model() {
	changed_model '\xc0\x7f'
}

# Runs every command that binds the tokenizer of model M to its weights
# and checks each refuses with "CMD: WANT", exit 1.
refused_everywhere() {
	local m=$1 want=$2
	run --separate-stderr sf-run --model "$m" -n 1 -p hi
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $want" ]
	run --separate-stderr sf-run --model "$m" --ppl "$CORPUS" --max-tokens 50
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $want" ]
	run --separate-stderr sf-profile --model "$m" --max-tokens 10 -q "$CORPUS" -o "$BATS_TEST_TMPDIR/p.sft"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-profile: $want" ]
	[ ! -e "$BATS_TEST_TMPDIR/p.sft" ]
}

# sf-pack with calib.json edited by the jq FILTER: exit 1, "sf-pack: FILE:
# WHY" and no image
calib_refused() {
	local c=$BATS_TEST_TMPDIR/c.json
	jq "$1" "$D/calib.json" > "$c"
	run --separate-stderr sf-pack --model "$MODEL" --codes "$D/codes.sfq" --calib "$c" \
		-o "$BATS_TEST_TMPDIR/x.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $c: $2" ]
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
	calib_refused '.budgets += [.budgets[0]]' "budget 0.5 listed twice"
}

@test "calib.json: a layer beyond the model, or one listed twice, is refused by name" {
	calib_refused '.budgets[0].layers[1].layer = 7' "budget 0.5: layer 7 is beyond the 4 layers"
	calib_refused '.budgets[0].layers[2] = .budgets[0].layers[1]' \
		"budget 0.5: layer 1 listed where layer 2 belongs (twice, or out of order)"
}

@test "calib.json: a value out of range names its budget, layer and group" {
	calib_refused '.budgets[0].layers[2].groups.ffn_in.k_top = 99999' \
		'budget 0.5 layer 2 ffn_in: "k_top" is 99999: expected 0..128'
}

@test "a tokenizer id beyond the model's embedding is refused where the model is bound" {
	m=$(copy_model)
	jq '.model.vocab["zzzq"] = 2000' "$MODEL/tokenizer.json" > "$m/tokenizer.json"
	want="$m/tokenizer.json: token 'zzzq' has id 2000, beyond the model's 1024 embedding rows (vocab_size)"
	refused_everywhere "$m" "$want"
	run --separate-stderr sf-pack --model "$m" -o "$BATS_TEST_TMPDIR/x.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $want" ]
	[ ! -e "$BATS_TEST_TMPDIR/x.sfimg" ]
	run --separate-stderr sf-encode --model "$m" --calibrate --codes "$D/codes.sfq" -t 2 \
		--corpus "$CORPUS" --budgets 0.5 --calib-tokens 8 --window 8 -o "$BATS_TEST_TMPDIR/c.json"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-encode: $want" ]
}

@test "a tokenizer vocabulary larger than vocab_size is refused, naming its first extra token" {
	m=$(copy_model)
	jq '.added_tokens += [{"id": 1024, "content": "<extra>", "single_word": false, "lstrip": false,
		"rstrip": false, "normalized": false, "special": true}]' "$MODEL/tokenizer.json" > "$m/tokenizer.json"
	refused_everywhere "$m" "$m/tokenizer.json: token '<extra>' has id 1024, beyond the model's 1024 embedding rows (vocab_size)"
}

@test "NaN weights: generation, --ppl, sf-profile and calibration name the layer, exit 1" {
	m=$(nan_model)
	refused_everywhere "$m" "layer 2: non-finite hidden state at position 0"
	# sf-encode refuses to encode a NaN weight, and the model's codes are
	# a look-alike's (issue 18 #7), so calibration never reaches the NaN
	run --separate-stderr sf-encode --model "$m" --method scalar -o "$BATS_TEST_TMPDIR/c.sfq"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-encode: layer 2 ffn_out: down column 100: weight 0 is nan" ]
	run --separate-stderr sf-encode --model "$m" --calibrate --codes "$D/codes.sfq" -t 2 \
		--corpus "$CORPUS" --budgets 0.5 --calib-tokens 8 --window 8 -o "$BATS_TEST_TMPDIR/c.json"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" == "sf-encode: $D/codes.sfq: codes of a look-alike of $m/model.safetensors (same shapes, other weights): fingerprint "* ]]
	[ ! -e "$BATS_TEST_TMPDIR/c.json" ]
	# and from an image of it
	sf-pack --model "$m" -o "$BATS_TEST_TMPDIR/nan.sfimg"
	run --separate-stderr sf-run -n 4 -p hi "$BATS_TEST_TMPDIR/nan.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: layer 2: non-finite hidden state at position 0" ]
	run --separate-stderr sf-run --ppl "$CORPUS" --max-tokens 50 "$BATS_TEST_TMPDIR/nan.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: layer 2: non-finite hidden state at position 0" ]
}

# Writes the bf16 bytes BYTES (printf escapes) over every weight of layer
# 0's input_layernorm (128 of them) in model directory M: set_norm M BYTES
set_norm() {
	local f=$1/model.safetensors hl off
	hl=$(od -An -tu8 -N8 "$f" | tr -d ' ')
	off=$(dd if="$f" bs=4096 iflag=skip_bytes,count_bytes skip=8 count="$hl" status=none |
		jq '.["model.layers.0.input_layernorm.weight"].data_offsets[0]')
	for _ in $(seq 128); do printf "$2"; done |
		dd of="$f" bs=1 seek=$((8 + hl + off)) conv=notrunc status=none
}

@test "q4 image, subnormal or NaN layer norm: decoded, or the layer named; no out-of-range int conversion" {
	# subnormal norm weights make activations too small for 127 / amax
	# (it overflowed to infinity and the integer products' codes came from
	# x * inf: in the _ref, SF_REF=1, INT_MIN times a code, UBSan's report
	# under SANITIZE=1)
	m=$(copy_model)
	set_norm "$m" '\x01\x00'
	sf-pack --model "$m" --dtype q4 -o "$BATS_TEST_TMPDIR/small.sfimg"
	for ref in 0 1; do
		SF_REF=$ref run --separate-stderr sf-run -n 2 -p hi "$BATS_TEST_TMPDIR/small.sfimg"
		[ "$status" -eq 0 ]
	done
	set_norm "$m" '\xc0\x7f'
	sf-pack --model "$m" --dtype q4 -o "$BATS_TEST_TMPDIR/nan.sfimg"
	for ref in 0 1; do
		SF_REF=$ref run --separate-stderr sf-run -n 2 -p hi "$BATS_TEST_TMPDIR/nan.sfimg"
		[ "$status" -eq 1 ]
		[ "${stderr_lines[0]}" = "sf-run: layer 0: non-finite hidden state at position 0" ]
		[ "${#stderr_lines[@]}" -eq 1 ]
	done
}

@test "--static scores of another model: refused, nothing leaked" {
	jq '.fingerprint = "0123456789abcdef"' "$D/task.json" > "$BATS_TEST_TMPDIR/other.json"
	fp=$(jq -r .fingerprint "$D/task.json")
	run --separate-stderr sf-run --compute-ratio 0.4 --static "$BATS_TEST_TMPDIR/other.json" \
		-n 1 -p hi "$D/plain.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $BATS_TEST_TMPDIR/other.json: scores of a look-alike of $D/plain.sfimg (same shapes, other weights): fingerprint 0123456789abcdef, expected $fp" ]
}

@test ".sfq: a flipped code byte is refused by its section's CRC, and versions 1 and 2 by name" {
	q=$D/codes.sfq
	hl=$(od -An -tu8 -j16 -N8 "$q" | tr -d ' ')
	data=$(( (24 + hl + 4 + 4095) / 4096 * 4096 ))
	dd if="$q" bs=4096 iflag=skip_bytes,count_bytes skip=24 count="$hl" status=none > "$BATS_TEST_TMPDIR/h.json"
	for s in "0 attn_in" "2 ffn_in" "3 ffn_out"; do
		set -- $s
		off=$(jq --argjson l "$1" --arg g "$2" \
			'.sections[] | select(.layer == $l and .group == $g) | .offset + (.bytes / 2 | floor)' \
			"$BATS_TEST_TMPDIR/h.json")
		cp "$q" "$BATS_TEST_TMPDIR/bad.sfq"
		printf '\x5a' | dd of="$BATS_TEST_TMPDIR/bad.sfq" bs=1 seek=$((data + off)) conv=notrunc status=none
		run --separate-stderr sf-pack --model "$MODEL" --codes "$BATS_TEST_TMPDIR/bad.sfq" -o "$BATS_TEST_TMPDIR/x.sfimg"
		[ "$status" -eq 1 ]
		[[ "${stderr_lines[0]}" == "sf-pack: $BATS_TEST_TMPDIR/bad.sfq: layer $1 $2: CRC-32C "*", expected "*": the codes are damaged" ]]
		[ ! -e "$BATS_TEST_TMPDIR/x.sfimg" ]
	done
	for v in 1 2; do
		cp "$q" "$BATS_TEST_TMPDIR/v$v.sfq"
		printf "\\x0$v" | dd of="$BATS_TEST_TMPDIR/v$v.sfq" bs=1 seek=8 conv=notrunc status=none
		run --separate-stderr sf-pack --model "$MODEL" --codes "$BATS_TEST_TMPDIR/v$v.sfq" -o "$BATS_TEST_TMPDIR/x.sfimg"
		[ "$status" -eq 1 ]
		[ "${stderr_lines[0]}" = "sf-pack: $BATS_TEST_TMPDIR/v$v.sfq: codes version $v, expected 3: made before fingerprints covered the weights; make it again" ]
	done
}

@test "a look-alike (one weight changed) is refused against the original's artifacts, naming both files" {
	m=$(changed_model '\x3f\x3f')
	fo=$(sf-encode --info "$D/codes.sfq" | jq -r .fingerprint)
	fm=$(sf-encode --info <(sf-encode --model "$m" --method scalar --layers 0-0 -o - 2>/dev/null) | jq -r .fingerprint)
	[ "$fo" != "$fm" ]
	[ "$(sf-encode --info "$D/codes.sfq" | jq -r .shape_fingerprint)" = "$(jq -r .shape_fingerprint "$D/calib.json")" ]
	want="(same shapes, other weights): fingerprint $fo, expected $fm"
	run --separate-stderr sf-pack --model "$m" --codes "$D/codes.sfq" -o "$BATS_TEST_TMPDIR/x.sfimg"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-pack: $D/codes.sfq: codes of a look-alike of $m/model.safetensors $want" ]
	run --separate-stderr sf-pack --model "$m" --calib "$D/calib.json" -o "$BATS_TEST_TMPDIR/x.sfimg"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-pack: $D/calib.json: tier sizes of a look-alike of $m/model.safetensors $want" ]
	run --separate-stderr sf-encode --model "$m" --calibrate --codes "$D/codes.sfq" \
		--corpus "$CORPUS" --budgets 0.5 -o "$BATS_TEST_TMPDIR/c.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-encode: $D/codes.sfq: codes of a look-alike of $m/model.safetensors $want" ]
	[ ! -e "$BATS_TEST_TMPDIR/x.sfimg" ] && [ ! -e "$BATS_TEST_TMPDIR/c.json" ]
	# the original's artifacts still pack with the original
	sf-pack --model "$MODEL" --codes "$D/codes.sfq" --calib "$D/calib.json" -o "$BATS_TEST_TMPDIR/x.sfimg"
}
