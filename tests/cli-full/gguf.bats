#!/usr/bin/env bats
# llama.cpp's gguf-py as the oracle of the GGUF reader, the ggml
# dequantizers and the config from GGUF metadata: llama.cpp set up as the
# benchmarks do it (tests/bench/llamacpp.bash: node-llama-cpp through npm,
# its llama.cpp source, Debian's python3 with numpy), then the unit tests
# that make check skips without it, which here must run.

load ../cli/helpers

# the short text of the random checkpoints' tests (setup_file writes it
# eight times to text.txt)
TEXT="a big dog ran far away, and my cow ran home"

# oracle_pair ARCH NAME SET [WIDE]: the oracle's checkpoint ARCH with the
# Python SET applied to its shape s, as NAME, and 64 wide (with WIDE
# applied too) as NAME64, for the block types; both to F32 GGUFs, NAME64's
# also to Q8_0 and Q4_0 by llama.cpp's quantizer.
oracle_pair() {
	local arch=$1 name=$2 q
	"$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import hf_forward as h
s = h.SHAPES[sys.argv[2]]
exec(sys.argv[5]); h.write(sys.argv[3], sys.argv[2], 7)
s.update(hidden_size=64, intermediate_size=128); exec(sys.argv[6]); h.write(sys.argv[4], sys.argv[2], 7)' \
		"$SF_ROOT/tests/oracle" "$arch" "$G/$name" "$G/${name}64" "$3" "${4:-pass}"
	lc llamacpp_gguf "$G/$name" "$G/$name.gguf" f32
	lc llamacpp_gguf "$G/${name}64" "$G/${name}64.gguf" f32
	for q in Q8_0 Q4_0; do
		lc llamacpp_quantize "$G/${name}64.gguf" "$G/${name}64-$q.gguf" "$q"
	done
}

setup_file() {
	local got
	got=$(bash -c 'source "$1/tests/bench/llamacpp.bash" && llamacpp_setup "$2" >&2 &&
		printf "%s\n%s\n" "$LLAMACPP_GGUF_PY" "$LLAMACPP_PYTHON"' _ \
		"$SF_ROOT" "${LLAMACPP_DIR:-/var/tmp/sf-llamacpp}")
	SF_GGUF_PY=$(sed -n 1p <<<"$got")
	PYTHON=$(sed -n 2p <<<"$got")
	SF_UNIT=$(dirname "$SF_FIXTURES")/tests
	export SF_GGUF_PY PYTHON SF_UNIT
	[ -d "$SF_SHARED/models/mix4-5m" ] || return 0
	# mix4-5m to GGUF by gguf-py, then quantized by llama.cpp's own
	# quantizer; a byte-level (Llama 3) vocabulary and its Qwen2 variant
	# on random weights
	G=$BATS_FILE_TMPDIR
	printf '%s\n%.0s' "$TEXT" 1 2 3 4 5 6 7 8 >"$G/text.txt"
	lc llamacpp_gguf "$SF_SHARED/models/mix4-5m" "$G/m5-bf16.gguf" bf16
	for q in Q8_0 Q4_0 Q4_K_M; do
		lc llamacpp_quantize "$G/m5-bf16.gguf" "$G/m5-$q.gguf" "$q"
	done
	"$SF_FIXTURES/mkmodel" -o "$G/bl" --vocab 268 --tokenizer "$SF_ROOT/tests/fixtures/bytelevel" >/dev/null
	mkdir -p "$G/blq" && cp "$G/bl"/* "$G/blq/"
	jq -c '.pre_tokenizer.pretokenizers[0].pattern.Regex |= sub("\\\\p\\{N\\}\\{1,3\\}"; "\\p{N}")
		| .model.ignore_merges = false' "$G/bl/tokenizer.json" >"$G/blq/tokenizer.json"
	lc llamacpp_gguf "$G/bl" "$G/bl.gguf"
	lc llamacpp_gguf "$G/blq" "$G/blq.gguf"
	# Llama 3's rope_scaling (an original context of 64, so that it
	# matters within 256 positions), which llama.cpp stores as factors
	mkdir -p "$G/m5s"
	ln -sf "$SF_SHARED/models/mix4-5m"/{model.safetensors,tokenizer.json,tokenizer_config.json} "$G/m5s/"
	jq '.rope_scaling = {rope_type: "llama3", factor: 8.0, low_freq_factor: 1.0,
		high_freq_factor: 4.0, original_max_position_embeddings: 64}' \
		"$SF_SHARED/models/mix4-5m/config.json" >"$G/m5s/config.json"
	lc llamacpp_gguf "$G/m5s" "$G/m5s.gguf" bf16
	# Qwen3 (the NumPy oracle's random checkpoint) and Qwen2 (biases)
	"$PYTHON" "$SF_ROOT/tests/oracle/hf_forward.py" write "$G/qwen3" qwen3 7
	"$SF_FIXTURES/mkmodel" -o "$G/qwen2" --arch qwen2 --vocab 268 --no-tie \
		--tokenizer "$SF_ROOT/tests/fixtures/bytelevel" >/dev/null
	for m in qwen3 qwen2; do lc llamacpp_gguf "$G/$m" "$G/$m.gguf" f32; done
	# the mixtures (the NumPy oracle's random checkpoints): OLMoE as
	# llama.cpp's graph computes it, without GQA or clip_qkv (OLMoE-1B-7B
	# has neither); Mixtral and Qwen2-MoE also 64 wide, for the block types
	for m in mixtral qwen2_moe qwen3_moe olmoe; do
		"$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import hf_forward as h
if sys.argv[3] == "olmoe": h.SHAPES["olmoe"].update(num_key_value_heads=4, clip_qkv=None)
h.write(sys.argv[2], sys.argv[3], 7)' "$SF_ROOT/tests/oracle" "$G/$m" "$m"
		lc llamacpp_gguf "$G/$m" "$G/$m.gguf" f32
	done
	# gpt-oss (the oracle's checkpoint with what llama.cpp's graph fixes:
	# SwiGLU clamped at 7, YaRN's correction range rounded out), its
	# experts in F32 and in MXFP4 blocks
	for m in gpt_oss gpt_oss_mxfp4; do
		"$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import hf_forward as h
s = h.SHAPES[sys.argv[3]]
s.update(swiglu_limit=7.0, rope_scaling=dict(s["rope_scaling"], truncate=True))
h.write(sys.argv[2], sys.argv[3], 7)' "$SF_ROOT/tests/oracle" "$G/$m" "$m"
		lc llamacpp_gguf "$G/$m" "$G/$m.gguf" f32
	done
	# Phi-3 (the oracle's checkpoint: fused projections, half of each
	# head turned, LongRoPE) without its sliding window, which llama.cpp's
	# phi3 graph leaves out for now; and 64 wide (head_dim 16, so that
	# q's, k's and v's rows make whole tiles) for the block types. Named
	# p3, not phi3: llama.cpp gives a model whose general.name says phi3
	# Phi-3's special tokens, which the byte-level vocabulary lacks
	oracle_pair phi3 p3 's.update(sliding_window=None)' \
		's["rope_scaling"].update(short_factor=[1.0, 1.5, 2.0, 3.0], long_factor=[1.2, 2.0, 4.0, 9.0])'
	# Gemma 3 and Gemma 2 (the oracle's checkpoints, Gemma 2's soft-capped)
	# with the query_pre_attn_scalar llama.cpp's graph takes (head_dim's)
	oracle_pair gemma3 g3 's.update(query_pre_attn_scalar=16)'
	oracle_pair gemma2 g2 's.update(query_pre_attn_scalar=16)'
	# o200k's pre-tokenizer (gpt-oss's) on the byte-level vocabulary
	mkdir -p "$G/b4o" && cp "$G/bl"/* "$G/b4o/"
	cat >"$G/o200k.txt" <<-'EOF'
	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
	EOF
	jq -c --rawfile r "$G/o200k.txt" '.pre_tokenizer.pretokenizers[0].pattern.Regex = ($r | rtrimstr("\n"))
		| .model.ignore_merges = false' "$G/bl/tokenizer.json" >"$G/b4o/tokenizer.json"
	lc llamacpp_gguf "$G/b4o" "$G/b4o.gguf"
	for m in mixtral qwen2_moe; do
		"$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import hf_forward as h
h.SHAPES[sys.argv[3]].update(hidden_size=64, intermediate_size=128); h.write(sys.argv[2], sys.argv[3], 7)' \
			"$SF_ROOT/tests/oracle" "$G/${m}64" "$m"
		lc llamacpp_gguf "$G/${m}64" "$G/${m}64.gguf" f32
		for q in Q8_0 Q4_0 Q4_K_M; do
			lc llamacpp_quantize "$G/${m}64.gguf" "$G/${m}64-$q.gguf" "$q"
		done
	done
}

# llama.cpp's helpers (tests/bench/llamacpp.bash), set up in setup_file
lc() {
	bash -c 'source "$1/tests/bench/llamacpp.bash" && llamacpp_setup "$2" >/dev/null && shift 2 && "$@"' \
		_ "$SF_ROOT" "${LLAMACPP_DIR:-/var/tmp/sf-llamacpp}" "$@"
}

# The prompt ids sf-run gives TEXT with a GGUF or an image, comma-separated.
sf_ids() {
	local model=(--model "$1")
	[[ $1 == *.sfimg ]] && model=("$1" --density 1)
	sf-run "${model[@]}" -p "$2" -n 0 --verbose-prompt 2>&1 | awk '/ -> / { print $1 }' | paste -sd, -
}

# sf-run's and llama.cpp's mean nll on the first 4096 tokens of a test
# split, in windows of 256, as "SF LC".
nll_pair() {
	local gguf=$1 text=$SF_SHARED/data/mix4/$2.test.txt sf lc
	sf=$(sf-run --model "$gguf" --ppl "$text" --max-tokens 4096 --window 256 2>/dev/null | jq .nll)
	lc=$(lc llamacpp_ppl "$gguf" 2 "$text" 4096 256 | jq .nll)
	echo "$sf $lc"
}

@test "every handled tensor type dequantizes as gguf-py's does, bit for bit" {
	[ -n "$SF_GGUF_PY" ]
	run "$SF_UNIT/test_ggml"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "the tokenizer of llama.cpp's vocabulary files (Llama 2, Phi-3, Llama 3, Qwen2, GPT-2, MPT) gives the ids Hugging Face's does on llama.cpp's tokenizer tests" {
	[ -n "$SF_GGUF_PY" ]
	run "$SF_UNIT/test_vocabs"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "mix4-5m converted by hf2gguf.py: config.json's config, the safetensors' bytes" {
	need_shared
	[ -n "$SF_GGUF_PY" ]
	run "$SF_UNIT/test_gguf_config"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "sf-run --model on mix4-5m as a BF16 GGUF: the safetensors' nll within 1e-5, the same greedy text" {
	need_shared
	local m=$SF_SHARED/models/mix4-5m g=$BATS_FILE_TMPDIR/m5-bf16.gguf a b
	a=$(sf-run --model "$m" --ppl "$SF_SHARED/data/mix4/kjv.test.txt" --max-tokens 4096 --window 256 2>/dev/null | jq .nll)
	b=$(sf-run --model "$g" --ppl "$SF_SHARED/data/mix4/kjv.test.txt" --max-tokens 4096 --window 256 2>/dev/null | jq .nll)
	echo "safetensors $a, gguf $b"
	jq -n --argjson a "$a" --argjson b "$b" -e '($a - $b | fabs) < 1e-5'
	a=$(sf-run --model "$m" -p "In the beginning" -n 48 --temp 0 2>/dev/null)
	b=$(sf-run --model "$g" -p "In the beginning" -n 48 --temp 0 2>/dev/null)
	echo "safetensors: $a"
	echo "gguf:        $b"
	[ -n "$a" ] && [ "$a" = "$b" ]
}

@test "sf-run --model on llama.cpp's Q8_0, Q4_0 and Q4_K_M of mix4-5m: nll within 0.005 of llama.cpp's on the same file" {
	need_shared
	local q genre got
	for q in Q8_0 Q4_0 Q4_K_M; do
		for genre in kjv man; do
			got=$(nll_pair "$BATS_FILE_TMPDIR/m5-$q.gguf" "$genre")
			echo "$q $genre: sf-run, llama.cpp nll: $got"
			jq -n --argjson a "${got% *}" --argjson b "${got#* }" -e '($a - $b | fabs) < 0.005'
		done
	done
}

@test "a GGUF's tokenizer gives llama.cpp's ids: SentencePiece (mix4-5m), byte-level llama-bpe, qwen2 and gpt-4o" {
	need_shared
	local g=$BATS_FILE_TMPDIR f txt a b
	for f in m5-Q4_K_M bl blq b4o; do
		for txt in "Once upon a time, it's 12345 o'clock!" "HELLO World's MixedCase iPhone THEY'RE path/to/x" \
			$'  two spaces, a\ttab,\na newline;  \xc3\xbf\xe2\x82\xac \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 SHOUTING' \
			"$(head -c 2000 "$SF_SHARED/data/mix4/man.test.txt")" \
			"$(head -c 2000 "$SF_SHARED/data/mix4/gcide.test.txt")"; do
			a=$(sf_ids "$g/$f.gguf" "$txt")
			b=$(lc llamacpp_tokenize "$g/$f.gguf" "$txt" | tr -d '[] ')
			[ -n "$a" ] && [ "$a" = "$b" ] || { echo "$f: '${txt:0:40}': sf-run $a, llama.cpp $b"; return 1; }
		done
	done
}

@test "the pipeline from llama.cpp's Q4_K_M of mix4-5m: artifacts agree on the file, the image within 0.01 nll of llama.cpp's" {
	need_shared
	local g=$BATS_FILE_TMPDIR m=$BATS_FILE_TMPDIR/m5-Q4_K_M.gguf d=$SF_SHARED/data/mix4 got
	sf-profile -q -m "$m" --task kjv --max-tokens 2000 "$d/kjv.profile.txt" |
		sf-coact -q -o "$g/kjv.sfc"
	sf-place --method coact "$g/kjv.sfc" -o "$g/coact.json"
	run --separate-stderr sf-pack --model "$m" --placement "$g/coact.json" -o "$g/q4km.sfimg"
	[ "$status" -eq 0 ]
	echo "$stderr"
	[[ $stderr == *"Q4_K, Q6_K matrices"*"requantized to Q4 columns"* ]]
	sf-pack --verify "$g/q4km.sfimg"
	got=$(sf-run "$g/q4km.sfimg" --density 1 --ppl "$d/kjv.test.txt" --max-tokens 4096 --window 256 2>/dev/null | jq .nll)
	got="$got $(lc llamacpp_ppl "$m" 2 "$d/kjv.test.txt" 4096 256 | jq .nll)"
	echo "image, llama.cpp nll: $got"
	jq -n --argjson a "${got% *}" --argjson b "${got#* }" -e '($a - $b | fabs) < 0.01'
	sf-pack --info "$g/q4km.sfimg" | jq -e '.top_dtypes == ["Q4"]'
	# the image carries the GGUF's tokenizer
	[ "$(sf_ids "$g/q4km.sfimg" "In the beginning, it's 12345 o'clock")" = \
	  "$(sf_ids "$m" "In the beginning, it's 12345 o'clock")" ]
}

# Checkpoint M of setup_file's and M.gguf converted from it: the nll of a
# short text from each within TIGHT, and llama.cpp's on the GGUF within TOL
# of sf-run's.
agrees() {
	local m=$1 tight=$2 tol=$3 g=$BATS_FILE_TMPDIR a b l
	a=$(sf-run -q -ctk f32 -ctv f32 --model "$g/$m" --ppl "$g/text.txt" --window 64 | jq .nll)
	b=$(sf-run -q -ctk f32 -ctv f32 --model "$g/$m.gguf" --ppl "$g/text.txt" --window 64 | jq .nll)
	l=$(lc llamacpp_ppl "$g/$m.gguf" 1 "$g/text.txt" 1000 64 | jq .nll)
	echo "$m: safetensors $a; gguf $b, llama.cpp $l"
	jq -n --argjson a "$a" --argjson b "$b" --argjson l "$l" --argjson t "$tight" \
		--argjson u "$tol" -e '($a - $b | fabs) < $t and ($b - $l | fabs) < $u'
}

@test "Llama 3's RoPE scaling as a GGUF's rope_freqs: the safetensors' nll, llama.cpp's, and an image's" {
	need_shared
	local g=$BATS_FILE_TMPDIR d=$SF_SHARED/data/mix4/kjv.test.txt a b c
	a=$(sf-run --model "$g/m5s" --ppl "$d" --max-tokens 4096 --window 256 2>/dev/null | jq .nll)
	b=$(nll_pair "$g/m5s.gguf" kjv)
	sf-pack -q --model "$g/m5s.gguf" --dtype bf16 -o "$g/m5s.sfimg"
	c=$(sf-run "$g/m5s.sfimg" --density 1 --ppl "$d" --max-tokens 4096 --window 256 2>/dev/null | jq .nll)
	echo "safetensors $a; gguf, llama.cpp $b; image $c"
	jq -n --argjson a "$a" --argjson b "${b% *}" --argjson l "${b#* }" --argjson c "$c" \
		-e '($a - $b | fabs) < 1e-5 and ($b - $l | fabs) < 0.005 and ($c - $b | fabs) < 1e-4'
	# without the scaling the same weights score otherwise
	a=$(sf-run --model "$SF_SHARED/models/mix4-5m" --ppl "$d" --max-tokens 4096 --window 256 2>/dev/null | jq .nll)
	jq -n --argjson a "$a" --argjson b "${b% *}" -e '($a - $b | fabs) > 0.05'
}

@test "Qwen3 and Qwen2 GGUFs: the safetensors' nll, llama.cpp's within 0.005, llama.cpp's ids" {
	local g=$BATS_FILE_TMPDIR m
	for m in qwen3 qwen2; do
		agrees "$m" 1e-5 0.005
		[ "$(sf_ids "$g/$m.gguf" "$TEXT")" = "$(lc llamacpp_tokenize "$g/$m.gguf" "$TEXT" | tr -d '[] ')" ]
	done
}

# quantized_agree M CLASS TOL: llama.cpp's Q8_0 and Q4_0 of M.gguf (its
# random checkpoint 64 wide) within 0.01 of llama.cpp's nll on the same
# file, and an image of the Q4_0 file (architecture CLASS) within TOL of
# the file's: its blocks rounded again as columns.
quantized_agree() {
	local m=$1 class=$2 tol=$3 g=$BATS_FILE_TMPDIR a b l q
	for q in Q8_0 Q4_0; do
		b=$(sf-run -q --model "$g/$m-$q.gguf" --ppl "$g/text.txt" --window 64 | jq .nll)
		l=$(lc llamacpp_ppl "$g/$m-$q.gguf" 1 "$g/text.txt" 1000 64 | jq .nll)
		echo "$q: gguf $b, llama.cpp $l"
		jq -n --argjson b "$b" --argjson l "$l" -e '($b - $l | fabs) < 0.01'
	done
	sf-pack -q --model "$g/$m-Q4_0.gguf" -o "$g/$m.sfimg"
	sf-pack --info "$g/$m.sfimg" | jq -e --arg c "$class" '.model.arch == $c'
	a=$(sf-run -q "$g/$m.sfimg" --density 1 --ppl "$g/text.txt" --window 64 | jq .nll)
	echo "image of Q4_0: $a"
	jq -n --argjson a "$a" --argjson b "$b" --argjson t "$tol" -e '($a - $b | fabs) < $t'
}

# --window 64 and llama.cpp's context of 64 are past the pretrained 32:
# LongRoPE's long factors on both sides. The random model's logits are
# sharp (nll near 9): its quantized files move the nll more than mix4-5m's
# (0.004 for Q8_0 against llama.cpp here), and an image of the Q4_0 file
# 0.008.
@test "Phi-3 GGUFs (fused projections, partial RoPE, LongRoPE's factor tensors): the safetensors' nll, llama.cpp's within 0.005, its Q8_0 and Q4_0 within 0.01 of llama.cpp's, an image of the Q4_0 file within 0.03" {
	local g=$BATS_FILE_TMPDIR
	agrees p3 1e-5 0.005
	agrees p364 1e-5 0.005
	[ "$(sf_ids "$g/p3.gguf" "$TEXT")" = "$(lc llamacpp_tokenize "$g/p3.gguf" "$TEXT" | tr -d '[] ')" ]
	quantized_agree p364 Phi3ForCausalLM 0.03
}

# Gemma 3's GGUF gains hold the one its checkpoints leave out (llama.cpp's
# converter adds it): the same nll from both is the offset applied once,
# and an image of the F32 file (whose config says so, rms_norm_offset 0)
# the same again. The random model's nll is near 19: an image of the Q4_0
# file moves it by 0.09.
@test "Gemma 3 GGUFs (gains holding the one, sandwich norms, GELU, sliding layers on their own base, linear scaling): the safetensors' nll, llama.cpp's within 0.005, llama.cpp's ids, its Q8_0 and Q4_0 within 0.01 of llama.cpp's, images of the F32 and Q4_0 files" {
	local g=$BATS_FILE_TMPDIR a b
	agrees g3 1e-5 0.005
	agrees g364 1e-5 0.005
	[ "$(sf_ids "$g/g3.gguf" "$TEXT")" = "$(lc llamacpp_tokenize "$g/g3.gguf" "$TEXT" | tr -d '[] ')" ]
	quantized_agree g364 Gemma3ForCausalLM 0.15
	sf-pack -q --model "$g/g364.gguf" --dtype f32 -o "$g/g364f.sfimg"
	a=$(sf-run -q -ctk f32 -ctv f32 "$g/g364f.sfimg" --density 1 --ppl "$g/text.txt" --window 64 | jq .nll)
	b=$(sf-run -q -ctk f32 -ctv f32 --model "$g/g364.gguf" --ppl "$g/text.txt" --window 64 | jq .nll)
	echo "image of F32: $a, the file $b"
	jq -n --argjson a "$a" --argjson b "$b" -e '($a - $b | fabs) < 1e-4'
}

# Gemma 2's soft-capping of the scores and logits (1.5 and 4 in the
# oracle's checkpoint, low enough to bite) as llama.cpp's gemma2 computes it.
@test "Gemma 2 GGUFs (soft-capped scores and logits, every other layer sliding, gains holding the one): the safetensors' nll, llama.cpp's within 0.005, its Q8_0 and Q4_0 within 0.01 of llama.cpp's, an image of the Q4_0 file" {
	local g=$BATS_FILE_TMPDIR
	agrees g2 1e-5 0.005
	agrees g264 1e-5 0.005
	quantized_agree g264 Gemma2ForCausalLM 0.15
}

@test "mixtures as GGUFs (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE): the safetensors' nll, llama.cpp's within 0.002" {
	local m
	for m in mixtral qwen2_moe qwen3_moe olmoe; do
		agrees "$m" 1e-6 0.002
	done
}

# Random routers over few experts: a token whose top experts are near a tie
# takes another expert for a rounding's difference, so the nll of two
# engines on one quantized file differs more than a dense model's (0.005);
# an expert misread (another's bytes, another order) moves it by tenths.
@test "llama.cpp's Q8_0, Q4_0 and Q4_K_M of a Mixtral and a Qwen2-MoE: nll within 0.03 of llama.cpp's" {
	local g=$BATS_FILE_TMPDIR m q a l
	for m in mixtral qwen2_moe; do
		for q in Q8_0 Q4_0 Q4_K_M; do
			a=$(sf-run -q -ctk f32 -ctv f32 --model "$g/${m}64-$q.gguf" --ppl "$g/text.txt" --window 64 | jq .nll)
			l=$(lc llamacpp_ppl "$g/${m}64-$q.gguf" 1 "$g/text.txt" 1000 64 | jq .nll)
			echo "$m $q: sf-run $a, llama.cpp $l"
			jq -n --argjson a "$a" --argjson l "$l" -e '($a - $l | fabs) < 0.03'
		done
	done
}

# llama.cpp rounds the inputs of its MXFP4 products to 8 bits a block, as
# sf-run does with --activations q8; by default it widens the codes and
# keeps f32 inputs (0.018 from llama.cpp here, 1.1e-4 rounded).
@test "gpt-oss GGUFs (experts F32 and MXFP4): the safetensors' nll and greedy tokens, llama.cpp's nll within 0.002 and 0.03, MXFP4's within 0.002 with --activations q8; an image of the MXFP4 file keeps MXFP4 experts" {
	local g=$BATS_FILE_TMPDIR m a b l q tol
	for m in gpt_oss gpt_oss_mxfp4; do
		a=$(sf-run -q -ctk f32 -ctv f32 --model "$g/$m" --ppl "$g/text.txt" --window 64 | jq .nll)
		b=$(sf-run -q -ctk f32 -ctv f32 --model "$g/$m.gguf" --ppl "$g/text.txt" --window 64 | jq .nll)
		q=$(sf-run -q -ctk f32 -ctv f32 --activations q8 --model "$g/$m.gguf" \
			--ppl "$g/text.txt" --window 64 | jq .nll)
		l=$(lc llamacpp_ppl "$g/$m.gguf" 1 "$g/text.txt" 1000 64 | jq .nll)
		tol=$([ $m = gpt_oss ] && echo 0.002 || echo 0.03)
		echo "$m: safetensors $a; gguf $b (--activations q8 $q), llama.cpp $l"
		jq -n --argjson a "$a" --argjson b "$b" --argjson l "$l" --argjson t "$tol" \
			-e '($a - $b | fabs) < 1e-6 and ($b - $l | fabs) < $t'
		jq -n --argjson q "$q" --argjson l "$l" -e '($q - $l | fabs) < 0.002'
		if [ $m = gpt_oss ]; then
			[ "$q" = "$b" ]
		fi
		[ "$(sf-run -q -m "$g/$m.gguf" -p "a big dog" -n 16 --temp 0)" = \
		  "$(sf-run -q -m "$g/$m" -p "a big dog" -n 16 --temp 0)" ]
	done
	sf-pack -q --model "$g/gpt_oss_mxfp4.gguf" -o "$g/oss.sfimg"
	sf-pack --info "$g/oss.sfimg" | jq -e '.experts.dtype == "MXFP4" and .model.arch == "GptOssForCausalLM"'
	a=$(sf-run -q -ctk f32 -ctv f32 "$g/oss.sfimg" --ppl "$g/text.txt" --window 64 | jq .nll)
	echo "image $a, gguf $b"
	jq -n --argjson a "$a" --argjson b "$b" -e '($a - $b | fabs) < 2e-4'
	# an e8m0 scale of 255 (not a number): one line naming the tensor
	"$PYTHON" -c 'import sys, shutil; sys.path.insert(0, sys.argv[3]); from gguf import GGUFReader
shutil.copy(sys.argv[1], sys.argv[2])
t = [t for t in GGUFReader(sys.argv[2], "r+").tensors if t.name == "blk.1.ffn_down_exps.weight"][0]
t.data.reshape(-1)[17 * 5] = 255' "$g/gpt_oss_mxfp4.gguf" "$g/bad.gguf" "$SF_GGUF_PY"
	run --separate-stderr sf-run -m "$g/bad.gguf" -p hi -n 1
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $g/bad.gguf: tensor 'blk.1.ffn_down_exps.weight': weights not finite, beyond what q8 blocks with an f16 scale hold, or an MXFP4 scale of 255" ]
}
