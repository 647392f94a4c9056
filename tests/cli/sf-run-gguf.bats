#!/usr/bin/env bats
# A GGUF without llama.cpp: mkgguf --model writes a one-layer llama with
# Q8_0, F16, BF16, F32, Q4_0, Q4_1 and Q4_K matrices and a SentencePiece
# vocabulary whose scores are chosen by hand, --moe and --moe-split a
# Mixtral of 3 experts in Q4_0, Q4_1 and Q8_0 (tests/fixtures/mkgguf.c).
# llama.cpp itself as the oracle is tests/cli-full/gguf.bats.

load helpers

setup_file() {
	export G=$BATS_FILE_TMPDIR
	"$SF_FIXTURES/mkgguf" --model "$G/tiny.gguf"
	"$SF_FIXTURES/mkgguf" --moe "$G/moe.gguf"
	"$SF_FIXTURES/mkgguf" --moe-split "$G/moe-split.gguf"
}

ids() {
	sf-run "$@" -n 0 --verbose-prompt 2>&1 | awk '/ -> / { print $1 }' | paste -sd, -
}

@test "a GGUF's SentencePiece vocabulary merges the highest score first, bytes for the rest" {
	# ll, he, llo, then \u2581he + llo = \u2581hello; z is no piece: <0x7A>
	[ "$(ids --model "$G/tiny.gguf" -p "hello zed")" = "1,271,259,125,261,266" ]
	# the space prefix at the text's start only: he + llo, no \u2581
	[ "$(ids --model "$G/tiny.gguf" -p "hellohello")" = "1,271,269,270" ]
}

@test "sf-run --model FILE.gguf generates and scores from mixed block types" {
	run --separate-stderr sf-run --model "$G/tiny.gguf" -p "hello world" -n 8 --temp 0
	[ "$status" -eq 0 ]
	[[ $stderr == *"decode 8 tokens"* ]]
	printf 'hello world\nhello hello world\n%.0s' 1 2 3 4 >"$G/t.txt"
	run --separate-stderr sf-run --model "$G/tiny.gguf" --ppl "$G/t.txt" --window 32
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.tokens > 50 and (.nll | isfinite) and .nll > 0'
}

@test "sf-pack packs a GGUF: the image verifies and carries its tokenizer" {
	run --separate-stderr sf-pack --model "$G/tiny.gguf" -o "$G/tiny.sfimg"
	[ "$status" -eq 0 ]
	[[ $stderr == "sf-pack: $G/tiny.gguf: its "*"Q4_K"*" matrices (6.24 bits a weight) requantized to Q4 columns"* ]]
	sf-pack --verify "$G/tiny.sfimg"
	[ "$(ids "$G/tiny.sfimg" --density 1 -p "hello zed")" = "1,271,259,125,261,266" ]
	sf-run "$G/tiny.sfimg" --density 1 -p "hello" -n 4 --temp 0 >/dev/null
}

@test "a damaged GGUF: one line naming the file, exit 1" {
	head -c 2000 "$G/tiny.gguf" >"$G/cut.gguf"
	run --separate-stderr sf-run --model "$G/cut.gguf" -p hello
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr == "sf-run: $G/cut.gguf: "* ]]
	# the tokenizer model renamed: refused by name
	sed 's/tokenizer\.ggml\.model\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00llama/tokenizer.ggml.model\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00bertx/' \
		"$G/tiny.gguf" >"$G/bert.gguf"
	run --separate-stderr sf-run --model "$G/bert.gguf" -p hello
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $G/bert.gguf: key 'tokenizer.ggml.model': 'bertx' unsupported (llama or gpt2)" ]
}

@test "a Mixtral GGUF: experts stacked as llama.cpp writes them give the floats of one tensor an expert" {
	printf 'hello world\nhello hello world\n%.0s' 1 2 3 4 >"$G/t.txt"
	run --separate-stderr sf-run -v --model "$G/moe.gguf" --ppl "$G/t.txt" --window 32
	[ "$status" -eq 0 ]
	[[ $stderr == *"MixtralForCausalLM"* ]]
	local a b c
	a=$(echo "$output" | jq .nll)
	b=$(sf-run -q --model "$G/moe-split.gguf" --ppl "$G/t.txt" --window 32 | jq .nll)
	c=$(sf-run -q --model "$G/tiny.gguf" --ppl "$G/t.txt" --window 32 | jq .nll)
	echo "stacked $a, split $b, the dense llama $c"
	[ "$a" = "$b" ] && [ "$a" != "$c" ]
}

@test "a Mixtral GGUF whose expert counts disagree: one line naming the file and the key or tensor, exit 1" {
	sed 's/llama\.expert_count\x04\x00\x00\x00\x03/llama.expert_count\x04\x00\x00\x00\x02/' \
		"$G/moe.gguf" >"$G/bad.gguf"
	run --separate-stderr sf-run --model "$G/bad.gguf" -p hello
	[ "$status" -eq 1 ]
	[[ $stderr =~ ^"sf-run: $G/bad.gguf: tensor 'blk.0.ffn_"(gate|up|down)"_exps.weight': 3 experts, expected 'expert_count' 2"$ ]]
	sed 's/llama\.expert_used_count\x04\x00\x00\x00\x02/llama.expert_used_count\x04\x00\x00\x00\x04/' \
		"$G/moe.gguf" >"$G/bad.gguf"
	run --separate-stderr sf-run --model "$G/bad.gguf" -p hello
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $G/bad.gguf: key 'llama.expert_used_count' 4 is above 'llama.expert_count' 3" ]
	# an expert beyond the count
	sed 's/blk\.0\.ffn_up\.2\.weight/blk.0.ffn_up.7.weight/' "$G/moe-split.gguf" >"$G/bad.gguf"
	run --separate-stderr sf-run --model "$G/bad.gguf" -p hello
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $G/bad.gguf: tensor 'blk.0.ffn_up.7.weight': not one MixtralForCausalLM computes" ]
}

# One layer of 3 experts, 2 a token: a pass picks all 3 where no --ram
# keeps 2 slots, which still hold experts picked again that run after the
# first, missing one.
@test "sf-pack of a Mixtral GGUF: the image's nll near the file's, the same from a pass, -b 1 and --simulate" {
	printf 'hello world\nhello hello world\n%.0s' 1 2 3 4 >"$G/t.txt"
	sf-pack -q --model "$G/moe.gguf" -o "$G/moe.sfimg"
	sf-pack --info "$G/moe.sfimg" | jq -e '.experts.count == 3 and .experts.dtype == "Q8"'
	local a b
	a=$(sf-run -q --model "$G/moe.gguf" --ppl "$G/t.txt" --window 32 | jq .nll)
	b=$(sf-run -q "$G/moe.sfimg" --ppl "$G/t.txt" --window 32 | jq .nll)
	echo "the GGUF $a, its image $b"
	jq -n --argjson a "$a" --argjson b "$b" -e '($a - $b | fabs) < 1e-3'
	[ "$(sf-run -q "$G/moe.sfimg" --ppl "$G/t.txt" --window 32 -b 1 | jq .nll)" = "$b" ]
	[ "$(sf-run -q "$G/moe.sfimg" --ppl "$G/t.txt" --window 32 --simulate | jq .nll)" = "$b" ]
}
