#!/usr/bin/env bats
# sf-run --model against tests/oracle/hf_forward.py, a literal NumPy forward
# of each architecture as transformers computes it, on tiny random F32
# checkpoints the oracle writes (byte-level tokenizer of tests/fixtures):
# the nll of a text within 2e-4 and the same greedy tokens. Llama checks
# the oracle against the path the PyTorch references already vouch for;
# Qwen3 (q/k norms, head_dim apart from hidden / heads, untied head), dense
# and from an image at budget 1, Phi-3 (fused projections, partial RoPE,
# longrope, a sliding window in every layer), Gemma 3 (gains stored less
# one, sandwich norms, GELU, a scaled embedding, sliding layers on their
# own RoPE), and the mixtures of experts Mixtral (4
# experts, top 2), Qwen2-MoE (a gated shared expert, biases, two shards),
# Qwen3-MoE, OLMoE (q/k norms over the whole projection, clip_qkv) and
# gpt-oss (sinks, sliding layers, YaRN, biases, clamped SwiGLU, fused or
# MXFP4 experts) then rest on it. Needs /usr/bin/python3 with numpy (python3-numpy), else every test
# skips with one line.

load helpers

ORACLE=$SF_ROOT/tests/oracle/hf_forward.py
PYTHON=${SF_PYTHON:-/usr/bin/python3}
# no merge of the tokenizer inside, so that its ids are bytes; the
# oracle's ids come from sf-run's own tokenization all the same
TEXT="a big dog ran far away, and my cow ran home"
NLL_TOL=2e-4

setup_file() {
	file_scratch sf-run-oracle
	printf '%s\n' "$TEXT" > "$D/text.txt"
	"$PYTHON" -c 'import numpy' 2> /dev/null || return 0
	"$PYTHON" "$ORACLE" write "$D/llama" llama 7
	"$PYTHON" "$ORACLE" write "$D/qwen3" qwen3 7
	"$PYTHON" "$ORACLE" write "$D/phi3" phi3 7
	"$PYTHON" "$ORACLE" write "$D/gemma2" gemma2 7
	"$PYTHON" "$ORACLE" write "$D/gemma3" gemma3 7
	"$PYTHON" "$ORACLE" write "$D/gemma3_mm" gemma3_mm 7
	"$PYTHON" "$ORACLE" write "$D/mixtral" mixtral 7
	"$PYTHON" "$ORACLE" write "$D/qwen2_moe" qwen2_moe 7 2
	"$PYTHON" "$ORACLE" write "$D/qwen3_moe" qwen3_moe 7
	"$PYTHON" "$ORACLE" write "$D/olmoe" olmoe 7
	"$PYTHON" "$ORACLE" write "$D/gpt_oss" gpt_oss 7
	"$PYTHON" "$ORACLE" write "$D/gpt_oss_mxfp4" gpt_oss_mxfp4 7
}

teardown_file() {
	rm -rf "$D"
}

need_numpy() {
	"$PYTHON" -c 'import numpy' 2> /dev/null ||
		skip "no numpy for $PYTHON (apt install python3-numpy): the NumPy oracle not run"
}

# The f32 KV cache: the oracle's attention has no f16 rounding; MXFP4
# experts times f32 inputs, not rounded to 8 bits as llama.cpp's are.
exact() { sf-run -q -ctk f32 -ctv f32 --activations f32 "$@"; }

# The text's token ids as sf-run gives them (BOS first), comma-separated.
ids() {
	sf-run -m "$1" -p "$TEXT" -n 0 --verbose-prompt -q 2>&1 | awk '$2 == "->" { print $1 }' |
		paste -sd,
}

# sf-run's nll of the text (MODEL: a directory, or an image with -m
# left out) and the oracle's, within NLL_TOL.
nll_matches() {
	local got=$1 want=$2
	echo "nll: sf-run $got, oracle $want"
	jq -n --argjson g "$got" --argjson w "$want" --argjson t "$NLL_TOL" -e '($g - $w | fabs) < $t'
}

# check_arch ARCH [ARGS]: ARGS go to sf-run's greedy run.
check_arch() {
	local m=$D/$1 ids got want
	shift
	need_numpy
	ids=$(ids "$m")
	[ "$(echo "$ids" | tr , '\n' | wc -l)" -eq 44 ]
	got=$(exact -m "$m" --ppl "$D/text.txt" --window 64 | jq .nll)
	want=$("$PYTHON" "$ORACLE" nll "$m" "$ids")
	nll_matches "$got" "$want"
	run --separate-stderr exact -m "$m" -p "$TEXT" -n 16 --temp 0 --ignore-eos "$@"
	[ "$status" -eq 0 ]
	want=$("$PYTHON" "$ORACLE" greedy "$m" 16 "$ids")
	echo "greedy: sf-run '$output', oracle '$want'"
	[ "$output" = "$want" ]
}

@test "Llama (tied head): the nll within 2e-4 of the NumPy oracle, its greedy tokens" {
	check_arch llama
}

@test "Qwen3 (q/k norms, head_dim 16 beside hidden / heads 12, untied head): the nll within 2e-4 of the oracle, its greedy tokens" {
	check_arch qwen3
}

# image_matches_dense ARCH CLASS [ARGS]: an image of checkpoint ARCH (its
# architectures[0] CLASS) at budget 1 gives the dense nll and greedy
# text, ARGS to both greedy runs.
image_matches_dense() {
	local m=$D/$1 class=$2 dense got
	shift 2
	need_numpy
	sf-pack -q --model "$m" -o "$m.sfimg"
	probe_direct "$m.sfimg"
	need_direct
	sf-pack --info "$m.sfimg" | jq -e --arg c "$class" '.model.arch == $c'
	dense=$(exact -m "$m" --ppl "$D/text.txt" --window 64 | jq .nll)
	got=$(exact "$m.sfimg" --ppl "$D/text.txt" --window 64 | jq .nll)
	nll_matches "$got" "$dense"
	[ "$(exact "$m.sfimg" -p "$TEXT" -n 16 --temp 0 --ignore-eos "$@")" = \
	  "$(exact -m "$m" -p "$TEXT" -n 16 --temp 0 --ignore-eos "$@")" ]
}

@test "a Qwen3 image at budget 1 gives the dense nll and greedy text" {
	image_matches_dense qwen3 Qwen3ForCausalLM
}

# A copy of checkpoint ARCH with tensor NAME replaced by N ones, or
# without it when N is 0.
with_tensor() {
	local arch=$1 name=$2 n=$3 m=$BATS_TEST_TMPDIR/bad
	cp -r "$D/$arch" "$m"
	(cd "$SF_ROOT/tests/oracle" && "$PYTHON" - "$m/model.safetensors" "$name" "$n") <<'EOF'
import sys, numpy as np, hf_forward as h
t = h.read_safetensors(sys.argv[1])
if int(sys.argv[3]):
    t[sys.argv[2]] = np.ones(int(sys.argv[3]))
else:
    del t[sys.argv[2]]
h.write_safetensors(sys.argv[1], t)
EOF
	echo "$m"
}

# A copy of checkpoint ARCH with config.json through the jq FILTER.
with_config() {
	local arch=$1 filter=$2 m=$BATS_TEST_TMPDIR/bad
	cp -r "$D/$arch" "$m"
	jq "$filter" "$D/$arch/config.json" > "$m/config.json"
	echo "$m"
}

# The command after WANT: exit 1 and the one line WANT.
refused() {
	local want=$1
	shift
	run --separate-stderr "$@"
	[ "$status" -eq 1 ]
	[ "$stderr" = "$want" ]
}

@test "a q_norm of the wrong size: one line naming the tensor and head_dim, exit 1" {
	local m
	need_numpy
	m=$(with_tensor qwen3 model.layers.1.self_attn.q_norm.weight 12)
	refused "sf-run: $m/model.safetensors: tensor 'model.layers.1.self_attn.q_norm.weight': shape [12], expected [16] (head_dim 16)" sf-run -m "$m" -p hi
}

@test "a head_dim that disagrees with the tensors: one line naming it, exit 1" {
	local m
	need_numpy
	m=$(with_config qwen3 '.head_dim = 12')
	refused "sf-run: $m/model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight': shape [64, 48], expected [48, 48] (head_dim 12)" sf-run -m "$m" -p hi
}

# The contexts (--ppl's window of 64 and -c 64) are past the pretrained
# one of 32, as the oracle's text of 44 tokens is: longrope's long factors
# on both sides.
@test "Phi-3 (fused q/k/v and gate/up, half of each head turned, longrope's long factors, a window of 20 in every layer): the nll within 2e-4 of the oracle, its greedy tokens, at any -b" {
	check_arch phi3 -c 64
	same_at_any_batch phi3
}

# A context within original_max_position_embeddings takes longrope's short
# factors, as transformers does for a text that short (44 tokens, and 60
# with the greedy ones, in 64), and it is -c's default; a longer one the
# long factors, as llama.cpp chooses by its context: another nll.
@test "Phi-3: longrope's short factors in a context within the pretrained one (the default -c), the long ones past it" {
	local m ids got want
	need_numpy
	m=$(with_config phi3 '.original_max_position_embeddings = 64')
	ids=$(ids "$m")
	got=$(exact -m "$m" --ppl "$D/text.txt" --window 43 | jq .nll)
	want=$("$PYTHON" "$ORACLE" nll "$m" "$ids")
	nll_matches "$got" "$want"
	[ "$(exact -m "$m" -p "$TEXT" -n 16 --temp 0 --ignore-eos)" = \
	  "$("$PYTHON" "$ORACLE" greedy "$m" 16 "$ids")" ]
	run --separate-stderr sf-run -m "$m" -p "$TEXT" -n 32 --temp 0 --ignore-eos -v
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"context 64 positions"* ]]
	[[ "$stderr" == *"context 64 of 256 (LongRoPE's short factors)"* ]]
	run --separate-stderr sf-run -m "$m" -p "$TEXT" -n 1 -c 65 -v
	[[ "$stderr" == *"context 65 of 256 (LongRoPE's long factors)"* ]]
	got=$(exact -m "$m" --ppl "$D/text.txt" --window 64 | jq .nll)
	! nll_matches "$got" "$want"
}

@test "a Phi-3 image at budget 1 gives the dense nll and greedy text" {
	image_matches_dense phi3 Phi3ForCausalLM -c 64
}

@test "Phi-3: a fused projection of the wrong size, factors of the wrong length, an odd partial rotation: one line, exit 1" {
	local m
	need_numpy
	m=$(with_tensor phi3 model.layers.1.self_attn.qkv_proj.weight 12)
	refused "sf-run: $m/model.safetensors: tensor 'model.layers.1.self_attn.qkv_proj.weight': shape [12], expected [96, 48] (head_dim 12)" sf-run -m "$m" -p hi
	rm -rf "$m"
	refuses_config phi3 '.rope_scaling.long_factor = [1, 2]' "config.json: 'rope_scaling.long_factor': expected a list of 3 numbers (rotated dimensions / 2)"
	refuses_config phi3 '.rope_scaling.short_factor[1] = 0' "config.json: 'rope_scaling.short_factor[1]': expected a finite number above 0"
	refuses_config phi3 '.partial_rotary_factor = 0.25' "config.json: 'partial_rotary_factor': 0.25 of head_dim 12 turns 3 dimensions, expected an even number of at least 2"
	refuses_config phi3 '.rope_scaling.type = "dynamic"' "config.json: 'rope_scaling': type 'dynamic' unsupported (only llama3, yarn, longrope and linear)"
}

@test "Gemma 3 (gains stored less one, q/k norms, sandwich norms, GELU, a scaled tied embedding, query_pre_attn_scalar, a sliding layer of window 6 on its own RoPE base, a full one with linear scaling): the nll within 2e-4 of the oracle, its greedy tokens, at any -b" {
	check_arch gemma3
	same_at_any_batch gemma3
}

@test "a Gemma 3 image at budget 1 gives the dense nll and greedy text" {
	image_matches_dense gemma3 Gemma3ForCausalLM
}

@test "Gemma 2 (Gemma 3's norms, scalar and GELU without its q/k norms or local RoPE base, every other layer sliding from the first, soft-capped scores and logits): the nll within 2e-4 of the oracle, its greedy tokens, at any -b, the sliding layer's KV cache a ring" {
	check_arch gemma2
	same_at_any_batch gemma2
	# the soft-capping bites: without it the nll moves
	local m kv
	m=$(with_config gemma2 '.attn_logit_softcapping = null | .final_logit_softcapping = null')
	[ "$(exact -m "$m" --ppl "$D/text.txt" --window 64 | jq .nll)" != \
	  "$(exact -m "$D/gemma2" --ppl "$D/text.txt" --window 64 | jq .nll)" ]
	nll_matches "$(exact -m "$m" --ppl "$D/text.txt" --window 64 | jq .nll)" \
		"$("$PYTHON" "$ORACLE" nll "$m" "$(ids "$m")")"
	rm -rf "$m"
	run --separate-stderr exact -m "$D/gemma2" -p "$TEXT" -n 16 --temp 0 --ignore-eos -b 1 --bench
	[ "$status" -eq 0 ]
	# the sliding layer holds its window of 6, the full one all 59 positions
	kv=$(jq '.num_key_value_heads * .head_dim * 4 * 2' "$D/gemma2/config.json")
	[ "$(echo "$output" | jq .kv_cache.bytes_in_use)" -eq $(((59 + 6) * kv)) ]
}

@test "a Gemma 2 image at budget 1 gives the dense nll and greedy text" {
	image_matches_dense gemma2 Gemma2ForCausalLM
}

@test "Gemma 2: a soft-capping bound of 0, another activation, q/k norms it has not: one line, exit 1" {
	need_numpy
	refuses_config gemma2 '.attn_logit_softcapping = 0' "config.json: 'attn_logit_softcapping': 0, expected above 0 and at most 1e+09"
	refuses_config gemma2 '.hidden_activation = "gelu"' "config.json: 'hidden_activation': unsupported (only gelu_pytorch_tanh)"
	refused "sf-run: $(with_tensor gemma2 model.layers.0.self_attn.q_norm.weight 16)/model.safetensors: tensor 'model.layers.0.self_attn.q_norm.weight': not part of a Gemma2ForCausalLM with this config.json" \
		sf-run -m "$BATS_TEST_TMPDIR/bad" -p hi
}

# The same weights as the gemma3 checkpoint, as Gemma 3's 4B and larger
# come: Gemma3ForConditionalGeneration, the text model's config in
# text_config (its token ids at the top), its tensors under transformers'
# older prefix (language_model.model.) or, renamed here, its newer one
# (model.language_model.), beside a vision tower's and projector's that
# sf-run does not read.
@test "Gemma 3 as Gemma3ForConditionalGeneration (text_config, its tensors under either prefix, a vision tower beside them): the text model's nll, fingerprint and greedy text, the oracle's nll; an image of it" {
	local m=$BATS_TEST_TMPDIR/new want got fp
	need_numpy
	want=$(exact -m "$D/gemma3" --ppl "$D/text.txt" --window 64 | jq .nll)
	got=$(exact -m "$D/gemma3_mm" --ppl "$D/text.txt" --window 64 | jq .nll)
	[ "$got" = "$want" ]
	nll_matches "$got" "$("$PYTHON" "$ORACLE" nll "$D/gemma3_mm" "$(ids "$D/gemma3_mm")")"
	fp=$(sf-run -m "$D/gemma3" -p hi -n 1 -v 2>&1 | grep -o 'fingerprint [0-9a-f]*')
	[ "$(sf-run -m "$D/gemma3_mm" -p hi -n 1 -v 2>&1 | grep -o 'fingerprint [0-9a-f]*')" = "$fp" ]
	[ "$(exact -m "$D/gemma3_mm" -p "$TEXT" -n 16 --temp 0 --ignore-eos)" = \
	  "$(exact -m "$D/gemma3" -p "$TEXT" -n 16 --temp 0 --ignore-eos)" ]
	cp -r "$D/gemma3_mm" "$m"
	(cd "$SF_ROOT/tests/oracle" && "$PYTHON" - "$m/model.safetensors") <<'EOF'
import sys, hf_forward as h
t = h.read_safetensors(sys.argv[1])
h.write_safetensors(sys.argv[1], {("model.language_model." + k[len("language_model.model."):]
                                   if k.startswith("language_model.model.") else "model." + k
                                   if k.startswith(("vision_tower.", "multi_modal_projector."))
                                   else k): v for k, v in t.items()})
EOF
	[ "$(exact -m "$m" --ppl "$D/text.txt" --window 64 | jq .nll)" = "$want" ]
	sf-pack -q --model "$D/gemma3_mm" -o "$BATS_TEST_TMPDIR/mm.sfimg"
	probe_direct "$BATS_TEST_TMPDIR/mm.sfimg"
	need_direct
	nll_matches "$(exact "$BATS_TEST_TMPDIR/mm.sfimg" --ppl "$D/text.txt" --window 64 | jq .nll)" \
		"$want"
}

@test "Gemma 3: soft-capping, another activation, bidirectional attention, a missing sandwich norm: one line, exit 1" {
	need_numpy
	refuses_config gemma3 '.final_logit_softcapping = 30.0' "config.json: 'final_logit_softcapping': unsupported in Gemma 3 (no soft-capping)"
	refuses_config gemma3 '.attn_logit_softcapping = 50.0' "config.json: 'attn_logit_softcapping': unsupported in Gemma 3 (no soft-capping)"
	refuses_config gemma3 '.hidden_activation = "gelu"' "config.json: 'hidden_activation': unsupported (only gelu_pytorch_tanh)"
	refuses_config gemma3 '.use_bidirectional_attention = true' "config.json: 'use_bidirectional_attention': true unsupported"
	refuses_without gemma3 model.layers.1.post_feedforward_layernorm.weight "model.safetensors: tensor 'model.layers.1.post_feedforward_layernorm.weight': missing"
}

@test "Mixtral (4 experts, top 2): the nll within 2e-4 of the oracle, its greedy tokens, at any -b" {
	local one
	check_arch mixtral
	one=$(exact -m "$D/mixtral" --ppl "$D/text.txt" --window 64 -b 1 | jq .nll)
	[ "$(exact -m "$D/mixtral" --ppl "$D/text.txt" --window 64 -b 7 -t 1 | jq .nll)" = "$one" ]
}

# sf-run -m on a copy of checkpoint ARCH with config.json through the jq
# FILTER, or without tensor NAME: exit 1 and the one line "sf-run:
# COPY/WHY", WHY naming the file in the copy.
refuses_config() {
	local arch=$1 filter=$2 why=$3 m
	m=$(with_config "$arch" "$filter")
	refused "sf-run: $m/$why" sf-run -m "$m" -p hi
	rm -rf "$m"
}

refuses_without() {
	local arch=$1 name=$2 why=$3 m
	m=$(with_tensor "$arch" "$name" 0)
	refused "sf-run: $m/$why" sf-run -m "$m" -p hi
	rm -rf "$m"
}

@test "Mixtral: an expert count that disagrees with the router, a missing expert, a top k above the count: one line, exit 1" {
	need_numpy
	refuses_config mixtral '.num_local_experts = 3' "model.safetensors: tensor 'model.layers.0.block_sparse_moe.gate.weight': shape [4, 48], expected [3, 48] (num_local_experts 3)"
	refuses_without mixtral model.layers.1.block_sparse_moe.experts.3.w2.weight "model.safetensors: tensor 'model.layers.1.block_sparse_moe.experts.3.w2.weight': missing"
	refuses_config mixtral '.num_experts_per_tok = 5' "config.json: 'num_experts_per_tok' 5 is above 'num_local_experts' 4"
}

# The nll of a pass of one token and of 7 tokens on one thread: the same
# floats, the experts run on each one's tokens together.
same_at_any_batch() {
	local one
	one=$(exact -m "$D/$1" --ppl "$D/text.txt" --window 64 -b 1 | jq .nll)
	[ "$(exact -m "$D/$1" --ppl "$D/text.txt" --window 64 -b 7 -t 1 | jq .nll)" = "$one" ]
}

@test "Qwen2-MoE (4 experts, top 2 not renormalised, a shared expert under a sigmoid gate, q/k/v biases, two shards): the nll within 2e-4 of the oracle, its greedy tokens, at any -b" {
	check_arch qwen2_moe
	same_at_any_batch qwen2_moe
}

@test "Qwen3-MoE (per-head q/k norms, head_dim 16, 8 experts, top 3 renormalised): the nll within 2e-4 of the oracle, its greedy tokens" {
	check_arch qwen3_moe
}

@test "OLMoE (q/k norms over the whole projection, clip_qkv, 8 experts, top 3 not renormalised, eps 1e-5 by default): the nll within 2e-4 of the oracle, its greedy tokens, at any -b" {
	check_arch olmoe
	same_at_any_batch olmoe
}

@test "Qwen3-MoE and OLMoE: an expert count that disagrees with the router, a missing expert, a top k above the count, zero experts: one line, exit 1" {
	need_numpy
	refuses_config qwen3_moe '.num_experts = 9' "model.safetensors: tensor 'model.layers.0.mlp.gate.weight': shape [8, 48], expected [9, 48] (num_experts 9)"
	refuses_without olmoe model.layers.1.mlp.experts.7.up_proj.weight "model.safetensors: tensor 'model.layers.1.mlp.experts.7.up_proj.weight': missing"
	refuses_config olmoe '.num_experts_per_tok = 9' "config.json: 'num_experts_per_tok' 9 is above 'num_experts' 8"
	refuses_config olmoe '.num_experts = 0' "config.json: 'num_experts': 0, expected 1..1024"
}

@test "Qwen2-MoE: a missing shared expert, dense layers among the mixtures (decoder_sparse_step, mlp_only_layers): one line, exit 1" {
	need_numpy
	refuses_config qwen2_moe '.decoder_sparse_step = 2' "config.json: 'decoder_sparse_step': 2 unsupported (only 1: dense layers among the mixtures are not computed)"
	refuses_config qwen2_moe '.mlp_only_layers = [1]' "config.json: 'mlp_only_layers': unsupported unless empty (dense layers among the mixtures are not computed)"
	refuses_config qwen2_moe 'del(.shared_expert_intermediate_size)' "config.json: 'shared_expert_intermediate_size': missing"
	refuses_config qwen2_moe '.shared_expert_intermediate_size = 64' "model-00002-of-00002.safetensors: tensor 'model.layers.0.mlp.shared_expert.gate_proj.weight': shape [80, 48], expected [64, 48]"
}

@test "Mixtral: sf-encode refuses a mixture of experts by name; sf-profile records each family's experts" {
	local a
	need_numpy
	refused "sf-encode: $D/mixtral: MixtralForCausalLM: a mixture of experts, which sf-encode does not take yet (no codes of experts)" \
		sf-encode --model "$D/mixtral" -o "$BATS_TEST_TMPDIR/x.sfq"
	refused "sf-encode: $D/olmoe: OlmoeForCausalLM: a mixture of experts, which sf-encode does not take yet (no codes of experts)" \
		sf-encode --model "$D/olmoe" -o "$BATS_TEST_TMPDIR/x.sfq"
	# every token's experts slot holds num_experts_per_tok experts
	for a in mixtral qwen2_moe qwen3_moe olmoe gpt_oss; do
		sf-profile -q --model "$D/$a" --groups experts -o "$BATS_TEST_TMPDIR/$a.sft" "$D/text.txt"
		sf-coact -q "$BATS_TEST_TMPDIR/$a.sft" -o "$BATS_TEST_TMPDIR/$a.sfc"
		sf-coact --info "$BATS_TEST_TMPDIR/$a.sfc" | jq -e --argjson k \
			"$(jq .num_experts_per_tok "$D/$a/config.json")" \
			'[.slots[] | .group == "experts" and (.mean_density * .entries - $k | fabs) < 1e-9] | all'
	done
}

# At -b 1 a sliding layer's KV cache is a ring of window 4 + 1 - 1 rows,
# which the text's 44 positions (and 15 of the 16 generated: the last is
# not fed) wrap many times: the oracle's nll and greedy tokens all the
# same, and the cache's bytes in use those of the ring's 4 positions
# beside the full layer's 59.
ring_matches() {
	local m=$D/$1 ids want kv
	ids=$(ids "$m")
	want=$("$PYTHON" "$ORACLE" nll "$m" "$ids")
	nll_matches "$(exact -m "$m" --ppl "$D/text.txt" --window 64 -b 1 | jq .nll)" "$want"
	want=$("$PYTHON" "$ORACLE" greedy "$m" 16 "$ids")
	run --separate-stderr exact -m "$m" -p "$TEXT" -n 16 --temp 0 --ignore-eos -b 1
	[ "$status" -eq 0 ]
	echo "greedy at -b 1: sf-run '$output', oracle '$want'"
	[ "$output" = "$want" ]
	run --separate-stderr exact -m "$m" -p "$TEXT" -n 16 --temp 0 --ignore-eos -b 1 --bench
	[ "$status" -eq 0 ]
	kv=$(jq '.num_key_value_heads * .head_dim * 4 * 2' "$m/config.json")
	echo "kv_cache: $(echo "$output" | jq -c .kv_cache), $kv bytes a row of keys and values"
	[ "$(echo "$output" | jq .kv_cache.positions)" -eq 59 ]
	[ "$(echo "$output" | jq .kv_cache.bytes_in_use)" -eq $(((59 + 4) * kv)) ]
}

@test "gpt-oss (q/k/v/o biases, sinks, a sliding layer of window 4 then a full one, YaRN, the router's and experts' biases, clamped SwiGLU, fused experts): the nll within 2e-4 of the oracle, its greedy tokens, at any -b, a sliding layer's KV cache a ring" {
	check_arch gpt_oss
	same_at_any_batch gpt_oss
	ring_matches gpt_oss
}

@test "gpt-oss with its experts in MXFP4 blocks and scales: the nll within 2e-4 of the oracle's decoding (the default, --activations f32), its greedy tokens, at any -b; their inputs rounded to 8 bits (--activations q8) within 5e-3, at any -b" {
	local got want q8=(-q -ctk f32 -ctv f32 --activations q8 -m "$D/gpt_oss_mxfp4")
	check_arch gpt_oss_mxfp4
	same_at_any_batch gpt_oss_mxfp4
	want=$(exact -m "$D/gpt_oss_mxfp4" --ppl "$D/text.txt" --window 64 | jq .nll)
	[ "$(sf-run -q -ctk f32 -ctv f32 -m "$D/gpt_oss_mxfp4" --ppl "$D/text.txt" --window 64 |
		jq .nll)" = "$want" ]
	got=$(sf-run "${q8[@]}" --ppl "$D/text.txt" --window 64 | jq .nll)
	[ "$got" != "$want" ]
	NLL_TOL=5e-3 nll_matches "$got" "$want"
	[ "$(sf-run "${q8[@]}" --ppl "$D/text.txt" --window 64 -b 1 -t 1 | jq .nll)" = "$got" ]
}

@test "gpt-oss: sinks of the wrong shape, a fused expert tensor missing or of another count, a top k above the count, layer_types of the wrong length, an unsupported rope type, MXFP4 scales of the wrong shape: one line, exit 1" {
	need_numpy
	refused "sf-run: $(with_tensor gpt_oss model.layers.0.self_attn.sinks 3)/model.safetensors: tensor 'model.layers.0.self_attn.sinks': shape [3], expected [4]" \
		sf-run -m "$BATS_TEST_TMPDIR/bad" -p hi
	rm -rf "$BATS_TEST_TMPDIR/bad"
	refuses_without gpt_oss model.layers.1.mlp.experts.down_proj "model.safetensors: tensor 'model.layers.1.mlp.experts.down_proj': missing"
	refuses_config gpt_oss '.num_local_experts = 3' "model.safetensors: tensor 'model.layers.0.mlp.experts.gate_up_proj': shape [4, 64, 64], expected [3, 64, 64] (num_local_experts 3)"
	refuses_config gpt_oss '.num_experts_per_tok = 5' "config.json: 'num_experts_per_tok' 5 is above 'num_local_experts' 4"
	refuses_config gpt_oss '.layer_types = ["full_attention"]' "config.json: 'layer_types': expected a list of 2 strings (num_hidden_layers)"
	refuses_config gpt_oss '.rope_scaling.rope_type = "dynamic"' "config.json: 'rope_scaling': type 'dynamic' unsupported (only llama3, yarn, longrope and linear)"
	refused "sf-run: $(with_tensor gpt_oss_mxfp4 model.layers.0.mlp.experts.down_proj_scales 3)/model.safetensors: tensor 'model.layers.0.mlp.experts.down_proj_scales': shape [3], expected [4, 64, 1] (num_local_experts 4)" \
		sf-run -m "$BATS_TEST_TMPDIR/bad" -p hi
}

@test "-v counts every parameter of each architecture's checkpoint" {
	local a want
	need_numpy
	for a in llama qwen3 phi3 gemma2 gemma3 mixtral qwen2_moe qwen3_moe olmoe gpt_oss; do
		want=$(cd "$SF_ROOT/tests/oracle" && "$PYTHON" -c 'import sys, hf_forward as h
print(sum(a.size for a in h.read_checkpoint(sys.argv[1]).values()))' "$D/$a")
		run --separate-stderr sf-run -m "$D/$a" -p hi -n 1 -v
		[ "$status" -eq 0 ]
		[[ "$stderr" == *", $want parameters, "* ]] || { echo "$a: $want: $stderr"; false; }
	done
}

@test "mkmodel --arch mixtral: a random BF16 Mixtral in two shards opens, the same nll at any -b" {
	local m=$BATS_TEST_TMPDIR/mix one
	"$SF_FIXTURES/mkmodel" -o "$m" --arch mixtral --experts 4 --experts-used 2 --layers 2 \
		--hidden 64 --intermediate 96 --shards 2 --tokenizer "$SF_ROOT/models/mix4-1m"
	jq -e '.num_local_experts == 4 and .num_experts_per_tok == 2' "$m/config.json"
	one=$(exact -m "$m" --ppl "$D/text.txt" --window 64 -b 1 | jq .nll)
	[ "$(exact -m "$m" --ppl "$D/text.txt" --window 64 -b 7 | jq .nll)" = "$one" ]
}
