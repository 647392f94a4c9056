#!/usr/bin/env bats
# sf-pack: images of the embedded mix4-1m with sf-place placements,
# sf-encode codes and tier sizes; --verify finds damage by region; --info
# summarises; bad input is one clear line, exit 1, and no output file.

load helpers

setup_file() {
	export D=$BATS_FILE_TMPDIR
	"$SF_FIXTURES/mkplanted" "$MODEL" 500 1 "$D/prof.sft" "$D/prof.sfc"
	"$SF_BIN/sf-place" -q --method coact "$D/prof.sfc" -o "$D/coact.json"
	"$SF_BIN/sf-encode" --model "$MODEL" --method scalar -t 2 -o "$D/codes.sfq"
	"$SF_BIN/sf-pack" --model "$MODEL" -o "$D/plain.sfimg"
	"$SF_BIN/sf-pack" --model "$MODEL" --codes "$D/codes.sfq" -o "$D/codes.sfimg"
	"$SF_BIN/sf-pack" --model "$MODEL" --placement "$D/coact.json" --codes "$D/codes.sfq" \
		--resident attention --dtype f16 -o "$D/full.sfimg"
}

# bytes [skip, skip + count) of a file
bytes() {
	dd if="$1" bs=4096 iflag=skip_bytes,count_bytes skip="$2" count="$3" status=none
}

@test "--help prints usage with an example and exits 0" {
	run sf-pack --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"Usage: sf-pack"* ]]
	[[ "$output" == *"Examples:"* ]]
}

@test "--version prints the version" {
	run sf-pack --version
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^sf-pack\ \(sparseflash\)\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
}

@test "usage errors exit 2 with one line" {
	run --separate-stderr sf-pack -o x.sfimg
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --model MODEL is required" ]
	run --separate-stderr sf-pack --model "$MODEL" -o -
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: -o: an image is written to a file, not to standard output" ]
	run --separate-stderr sf-pack --model "$MODEL" --dtype f8 -o x.sfimg
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --dtype: 'f8' is not keep, bf16, f16, f32, q8 or q4" ]
	run --separate-stderr sf-pack --model "$MODEL" --dtype q4 --quant mse -o x.sfimg
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --quant: 'mse' is not rtn or search" ]
	run --separate-stderr sf-pack --model "$MODEL" --quant search -o x.sfimg
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --quant applies to q8, q6 and q4: --dtype, --token-embedding-type or --output-tensor-type" ]
	run --separate-stderr sf-pack --model "$MODEL" --resident mlp -o x.sfimg
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --resident: 'mlp' is not attn_in, attn_out, ffn_in, ffn_out, attention, ffn or none" ]
	run --separate-stderr sf-pack --model "$MODEL" --keep k.json --codes c.sfq -o x.sfimg
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --keep and --codes cannot be combined: the codes of ffn_in hold whole columns, dropped neurons' rows included" ]
	run --separate-stderr sf-pack --verify a --info b
	[ "$status" -eq 2 ]
	[ "${stderr_lines[1]}" = "Try 'sf-pack --help'." ]
	[ ! -e x.sfimg ]
}

@test "q8 and q4 images verify; --info gives their top-tier bytes per dtype" {
	sf-pack --model "$MODEL" --codes "$D/codes.sfq" --dtype q8 -o "$D/q8.sfimg"
	sf-pack --model "$MODEL" --dtype q4 --quant rtn --resident attn_in -o "$D/q4.sfimg"
	sf-pack --verify "$D/q8.sfimg"
	sf-pack --verify "$D/q4.sfimg"
	run sf-pack --info "$D/plain.sfimg"
	[ "$status" -eq 0 ]
	bf=$(jq '.sizes.top_by_dtype.BF16' <<< "$output")
	run sf-pack --info "$D/q8.sfimg"
	[ "$(jq -c .top_dtypes <<< "$output")" = '["Q8"]' ]
	[ "$(jq '.sizes.top_by_dtype.Q8 == .sizes.top' <<< "$output")" = true ]
	q8=$(jq '.sizes.top_by_dtype.Q8' <<< "$output")
	[ "$(jq .producer.options.quant <<< "$output")" = '"search"' ]
	# a column of 32 rows: 34 bytes against BF16's 64
	[ $((q8 * 64)) -eq $((bf * 34)) ]
	run sf-pack --info "$D/q4.sfimg"
	[ "$(jq -c '[.groups[0].dtypes, .groups[1].dtypes]' <<< "$output")" = '[["BF16","BF16","BF16"],["Q4"]]' ]
	[ "$(jq .producer.options.quant <<< "$output")" = '"rtn"' ]
}

@test "a packed image verifies, and --info summarises it" {
	run sf-pack --verify "$D/full.sfimg"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	sf-pack --info "$D/full.sfimg" > "$D/info.json"
	size=$(stat -c %s "$D/full.sfimg")
	jq -e --argjson size "$size" '.sizes.file == $size and $size % 4096 == 0' "$D/info.json"
	jq -e '.top_dtypes == ["F16"] and .placement_methods == {"coact": 8}' "$D/info.json"
	jq -e '.codes.method == "scalar" and .tiers == null' "$D/info.json"
	jq -e '[.groups[] | select(.resident) | .group] | unique == ["attn_in", "attn_out"]' "$D/info.json"
	jq -e '[.regions[] | .offset % 4096 == 0] | all' "$D/info.json"
	fp=$(sf-encode --info "$D/codes.sfq" | jq -r .fingerprint)
	jq -e --arg fp "$fp" '.fingerprint == $fp' "$D/info.json"
	# the sizes add up to the file
	jq -e '.sizes | .header + .resident + .index + .codebook + .top + .mid + .padding == .file' "$D/info.json"
}

@test "the permutations in the image are sf-place's" {
	sf-pack --info "$D/full.sfimg" > "$D/info.json"
	off=$(jq '.regions[] | select(.kind == "index") | .offset' "$D/info.json")
	# layer 0 ffn_in is the first flash group: its perm opens the index region
	got=$(bytes "$D/full.sfimg" "$off" 512 | od -An -v -tu4 | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')
	want=$(jq -r '.groups[] | select(.layer == 0 and .group == "ffn_in") | .perm | map(tostring) | join(" ")' "$D/coact.json")
	[ "$got" = "$want" ]
}

@test "the middle tier of an identity image is sf-encode's codes byte for byte" {
	hl=$(od -An -tu8 -j16 -N8 "$D/codes.sfq" | tr -d ' ')
	data=$(( (24 + hl + 4 + 4095) / 4096 * 4096 ))	# the header, its CRC, padding
	bytes "$D/codes.sfq" 24 "$hl" > "$D/sfq-header.json"
	# per section: its offset in the .sfq, the image's mid region of the
	# same layer and group, both lengths
	sf-pack --info "$D/codes.sfimg" |
		jq -r --slurpfile q "$D/sfq-header.json" '
			(.regions | map({(.name): .}) | add) as $r |
			$q[0].sections[] | $r["layer \(.layer) \(.group) mid"] as $m |
			"\(.offset) \(.bytes) \($m.offset) \($m.length)"' > "$D/pairs"
	n=0
	while read -r so len io il; do
		[ "$il" -eq "$len" ]
		cmp <(bytes "$D/codes.sfq" $((data + so)) "$len") <(bytes "$D/codes.sfimg" "$io" "$len")
		n=$((n + 1))
	done < "$D/pairs"
	[ "$n" -eq 16 ]
}

@test "a flipped byte is reported with its region, exit 1" {
	sf-pack --info "$D/full.sfimg" > "$D/info.json"
	for name in resident "layer 2 ffn_in top" "layer 3 ffn_out mid"; do
		cp "$D/full.sfimg" "$D/bad.sfimg"
		off=$(jq --arg n "$name" '.regions[] | select(.name == $n) | .offset + (.length / 2 | floor)' "$D/info.json")
		printf '\x5a' | dd of="$D/bad.sfimg" bs=1 seek="$off" conv=notrunc status=none
		run --separate-stderr sf-pack --verify "$D/bad.sfimg"
		[ "$status" -eq 1 ]
		[[ "${stderr_lines[0]}" == "sf-pack: $D/bad.sfimg: region '$name' ("*"): CRC-32C "*", expected "*": the image is damaged" ]]
	done
}

@test "a truncated image and another format's file are refused" {
	size=$(stat -c %s "$D/full.sfimg")
	head -c $((size - 4096)) "$D/full.sfimg" > "$D/short.sfimg"
	run --separate-stderr sf-pack --verify "$D/short.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" == "sf-pack: $D/short.sfimg: region 'layer 3 ffn_out mid' (bytes "*") extends past the end of the file ("*" bytes): truncated?" ]]
	run --separate-stderr sf-pack --info "$D/codes.sfq"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $D/codes.sfq: not a sparseflash image (bad magic)" ]
	cp "$D/plain.sfimg" "$D/v6.sfimg"
	printf '\x07' | dd of="$D/v6.sfimg" bs=1 seek=8 conv=notrunc status=none
	run --separate-stderr sf-pack --verify "$D/v6.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $D/v6.sfimg: image format version 7, expected 6" ]
	# versions 3 to 5 are version 6 without tiled experts (5), and without
	# quantized embedding or head rows (3) and experts (3 and 4): read
	for v in 5 4 3; do
		printf "\\x0$v" | dd of="$D/v6.sfimg" bs=1 seek=8 conv=notrunc status=none
		sf-pack --verify "$D/v6.sfimg"
		[ "$(sf-pack --info "$D/v6.sfimg" | jq .version)" = $v ]
	done
	printf '\x02' | dd of="$D/v6.sfimg" bs=1 seek=8 conv=notrunc status=none
	run --separate-stderr sf-run -p hi "$D/v6.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $D/v6.sfimg: image format version 2, expected 6: made before q8 and q4 columns held their scales first; pack it again" ]
	printf '\x01' | dd of="$D/v6.sfimg" bs=1 seek=8 conv=notrunc status=none
	run --separate-stderr sf-run -p hi "$D/v6.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $D/v6.sfimg: image format version 1, expected 6: made before fingerprints covered the weights; make it again" ]
}

@test "tier sizes from sf-encode --calibrate are carried in the header" {
	need_shared
	sf-encode --model "$MODEL" --calibrate --codes "$D/codes.sfq" -t 2 \
		--corpus "$SF_SHARED/data/mix4/kjv.calib.txt" --budgets 0.5 --calib-tokens 8 \
		--window 8 -o "$D/calib.json"
	sf-pack --model "$MODEL" --codes "$D/codes.sfq" --calib "$D/calib.json" -o "$D/tiers.sfimg"
	sf-pack --info "$D/tiers.sfimg" > "$D/info.json"
	jq -e --slurpfile c "$D/calib.json" '.tiers.budgets == [$c[0].budgets[0].budget]' "$D/info.json"
	sf-pack --verify "$D/tiers.sfimg"
	run --separate-stderr sf-pack --model "$MODEL" --calib "$D/calib.json" -o "$D/out.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" == "sf-pack: $D/calib.json: budget 0.5 layer 0 attn_in: "*" middle-tier entries, but no --codes" ]]
	[ ! -e "$D/out.sfimg" ]
}

@test "a Qwen2 model with biases, an untied head and F32 weights packs to BF16" {
	"$SF_FIXTURES/mkmodel" -o "$D/qwen" --arch qwen2 --no-tie --dtype f32 --layers 2 \
		--tokenizer "$MODEL"
	sf-pack --model "$D/qwen" --dtype bf16 --resident attn_out -o "$D/qwen.sfimg"
	sf-pack --verify "$D/qwen.sfimg"
	sf-pack --info "$D/qwen.sfimg" > "$D/info.json"
	jq -e '.top_dtypes == ["BF16"] and .model.arch == "Qwen2ForCausalLM"' "$D/info.json"
	jq -e '[.groups[] | select(.group == "attn_out") | .dtypes[0]] == ["F32", "F32"]' "$D/info.json"
}

@test "--dtype q4 quantizes the embedding to q4 and an untied head to q6, as llama.cpp's Q4_0, the same bytes at any -t" {
	"$SF_FIXTURES/mkmodel" -o "$D/untied" --no-tie --layers 2 --tokenizer "$MODEL"
	sf-pack -t 1 --model "$D/untied" --dtype q4 -o "$D/untied.sfimg"
	sf-pack -t 3 --model "$D/untied" --dtype q4 -o "$D/untied3.sfimg"
	cmp "$D/untied.sfimg" "$D/untied3.sfimg"
	sf-pack --verify "$D/untied.sfimg"
	sf-pack --info "$D/untied.sfimg" > "$D/info.json"
	# 1024 rows of 128: 4 blocks of 18 bytes (q4) and of 26 (q6)
	jq -e '.token_embedding == {"dtype": "Q4", "source_dtype": "BF16", "bytes": 73728}' "$D/info.json"
	jq -e '.output == {"dtype": "Q6", "source_dtype": "BF16", "bytes": 106496, "tied": false}' "$D/info.json"
	jq -e '.version == 6 and .producer.options.output_tensor_type == "q6"' "$D/info.json"
	sf-pack --model "$D/untied" --dtype q8 --output-tensor-type keep -o "$D/untied8.sfimg"
	sf-pack --info "$D/untied8.sfimg" > "$D/info.json"
	jq -e '.token_embedding.dtype == "Q8" and .output.dtype == "BF16"' "$D/info.json"
	# a tied matrix takes the head's type; bf16 tops keep the model's
	sf-pack --model "$MODEL" --dtype q4 -o "$D/tied.sfimg"
	jq -e '.token_embedding.dtype == "Q6" and .output.tied' <(sf-pack --info "$D/tied.sfimg")
	jq -e '.token_embedding.dtype == "BF16"' <(sf-pack --info "$D/plain.sfimg")
	run --separate-stderr sf-pack --model "$MODEL" --output-tensor-type f16 -o x.sfimg
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --output-tensor-type: 'f16' is not keep, q8, q6 or q4" ]
	run --separate-stderr sf-pack --model "$MODEL" --dtype q6 -o x.sfimg
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --dtype: 'q6' is not keep, bf16, f16, f32, q8 or q4" ]
}

@test "--keep leaves neurons out of ffn_in rows and ffn_out entries" {
	fp=$(sf-pack --info "$D/plain.sfimg" | jq -r .fingerprint)
	sfp=$(sf-pack --info "$D/plain.sfimg" | jq -r .shape_fingerprint)
	cat > "$D/neurons.json" <<-EOF
	{"format": "sparseflash-neurons", "version": 2, "fingerprint": "$fp", "shape_fingerprint": "$sfp",
	 "layers": [{"layer": 1, "neurons": [0, 1, 2, 3, 100, 383]}, {"layer": 2, "neurons": [7]}]}
	EOF
	sf-pack --model "$MODEL" --placement "$D/coact.json" --keep "$D/neurons.json" -o "$D/keep.sfimg"
	sf-pack --verify "$D/keep.sfimg"
	sf-pack --info "$D/keep.sfimg" > "$D/info.json"
	jq -e '.neurons == {"kept": 775, "total": 1536}' "$D/info.json"
	jq -e '[.groups[] | select(.group == "ffn_out") | .entries] == [384, 6, 1, 384]' "$D/info.json"
	# ffn_in bundles of layer 1: 6 rows of gate and 6 of up, BF16
	jq -e '.groups[] | select(.layer == 1 and .group == "ffn_in") | .top_bytes == 24' "$D/info.json"
	jq -e '.regions[] | select(.name == "layer 2 ffn_out top") | .length == 256' "$D/info.json"
}

@test "inputs of another model or shape: one line, exit 1, no output" {
	jq '.fingerprint = "0123456789abcdef"' "$D/coact.json" > "$D/other.json"
	run --separate-stderr sf-pack --model "$MODEL" --placement "$D/other.json" -o "$D/out.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $D/other.json: placement of a look-alike of $MODEL/model.safetensors (same shapes, other weights): fingerprint 0123456789abcdef, expected $(jq -r .fingerprint "$D/coact.json")" ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ ! -e "$D/out.sfimg" ]
	"$SF_FIXTURES/mkmodel" -o "$D/other" --intermediate 256 --tokenizer "$MODEL"
	sf-encode --model "$D/other" --method scalar -o "$D/other.sfq"
	run --separate-stderr sf-pack --model "$MODEL" --codes "$D/other.sfq" -o "$D/out.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" == "sf-pack: $D/other.sfq: codes of another model than $MODEL/model.safetensors: shape fingerprint "*", expected $(jq -r .shape_fingerprint "$D/coact.json")" ]]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ ! -e "$D/out.sfimg" ]
	jq '{format: "sparseflash-neurons", version: 2, fingerprint, shape_fingerprint, layers: [{layer: 0, neurons: [384]}]}' "$D/coact.json" > "$D/bad.json"
	run --separate-stderr sf-pack --model "$MODEL" --keep "$D/bad.json" -o "$D/out.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $D/bad.json: layer 0: neuron 384 is out of range: expected 0..383" ]
	[ ! -e "$D/out.sfimg" ]
	run --separate-stderr sf-pack --model "$MODEL" -o /dev/null
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: /dev/null: not a regular file: this output is written with random access" ]
	# and no temporary left behind
	[ -z "$(find "$D" -name 'out.sfimg.tmp.*')" ]
}

@test "--dry-run: the image's size and resident bytes before packing, nothing written" {
	need_self_exec
	local before; before=$(ls -A "$D")
	run --separate-stderr sf-pack --model "$MODEL" --placement "$D/coact.json" --codes "$D/codes.sfq" \
		--resident attention --dtype f16 --dry-run
	[ "$status" -eq 0 ]
	[ "$(ls -A "$D")" = "$before" ]
	local sizes; sizes=$(sf-pack --info "$D/full.sfimg" | jq -c .sizes)
	[ "$(echo "$output" | jq .image_bytes)" = "$(stat -c %s "$D/full.sfimg")" ]
	[ "$(echo "$output" | jq .image_bytes)" = "$(echo "$sizes" | jq .file)" ]
	[ "$(echo "$output" | jq .flash_bytes)" = "$(echo "$sizes" | jq '.top + .mid')" ]
	[ "$(echo "$output" | jq .resident_bytes)" = "$(echo "$sizes" | jq '.resident + .index + .codebook')" ]
	echo "$output" | jq -e '.context == 1024 and .ram.resident >= .resident_bytes and
		.ram_at_least == .ram.process + .ram.resident + .ram.state + .ram.kv + .ram.buffers +
		.ram.cache and .ram.kv_positions == 128'
	# no skeleton left in $TMPDIR
	[ -z "$(find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'sf-pack-dry-run.*' -user "$(id -u)" 2>/dev/null)" ]
	run --separate-stderr sf-pack --model "$MODEL" --dry-run -o "$BATS_TEST_TMPDIR/x.sfimg"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-pack: --dry-run writes nothing: no -o" ]
}

@test "-q silences the progress at a terminal; --progress in a log ends with the total" {
	run --separate-stderr sf-pack --model "$MODEL" --progress -o "$BATS_TEST_TMPDIR/p.sfimg"
	[ "$status" -eq 0 ]
	[[ "${stderr_lines[-1]}" =~ ^sf-pack:\ [0-9]+\ MiB\ in\ [0-9.]+\ s,\ [0-9.e+]+\ MiB/s$ ]]
	script -qec "sf-pack -q --model '$MODEL' -o '$BATS_TEST_TMPDIR/q.sfimg'" /dev/null >"$BATS_TEST_TMPDIR/tty"
	[ ! -s "$BATS_TEST_TMPDIR/tty" ]
}

@test "--dry-run and --info: the least --ram is what sf-run needs: it runs there, and not 2 MiB below (its room for the process, 1 MiB, and more)" {
	need_plain_build
	need_self_exec
	local img=$BATS_TEST_TMPDIR/ram.sfimg ram info
	ram=$(sf-pack --model "$MODEL" --dry-run | jq .ram_at_least)
	sf-pack -q --model "$MODEL" -o "$img"
	info=$(sf-pack --info "$img" | jq .ram_at_least)
	for r in "$ram" "$info"; do
		run --separate-stderr sf-run -q -p "In the beginning" -n 4 --temp 0 --ram "$r" "$img"
		[ "$status" -eq 0 ]
		[ -n "$output" ]
		run --separate-stderr sf-run -q -p "In the beginning" -n 4 --temp 0 --ram $((r - 2097152)) "$img"
		[ "$status" -eq 1 ]
		[[ "${stderr_lines[0]}" == "sf-run: $img: --ram $((r - 2097152)): "*" bytes needed: "*"; give --ram "*" or more" ]]
	done
	# the two agree within the few pages a process's resident set varies by
	[ $((ram > info ? ram - info : info - ram)) -lt 1048576 ]
}

@test "-v states the memory before packing" {
	run --separate-stderr sf-pack -v --model "$MODEL" -o "$BATS_TEST_TMPDIR/v.sfimg"
	[ "$status" -eq 0 ]
	[[ "${stderr_lines[0]}" =~ ^"sf-pack: memory: about "[0-9.]+" MiB: a group's columns, one matrix of the weights at a time (mapped), the codes (mapped)"$ ]]
}
