#!/usr/bin/env bats
# Mixtures of experts from an image: sf-pack stores each routed expert as
# one record on flash (router, attention, norms and a shared expert
# resident), and sf-run IMAGE reads only the experts the router picks,
# each once a pass, into expert slots that --ram and --cache-ratio size.
# The oracle is sf-run --model: with attention resident the products are
# the dense engine's on the same bytes, so the nll is equal bit for bit;
# with attention on flash (the column path) within 2e-4, as the dense
# images' tests allow. A random Mixtral by mkmodel; Qwen2-MoE (a gated
# shared expert) and gpt-oss (biases resident beside the experts on flash,
# its experts fused in F32 or in MXFP4) from the NumPy oracle's writer
# when numpy is there.

load helpers

PYTHON=${SF_PYTHON:-/usr/bin/python3}
TEXT="a big dog ran far away, and my cow ran home"
NLL_TOL=2e-4

setup_file() {
	file_scratch sf-run-experts
	"$SF_FIXTURES/mkmodel" -o "$D/mix" --arch mixtral --experts 4 --experts-used 2 --layers 2 \
		--hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 1024 --seed 3 \
		--tokenizer "$MODEL" > /dev/null
	"$SF_BIN/sf-pack" -q --model "$D/mix" -o "$D/mix.sfimg"
	"$SF_BIN/sf-pack" -q --model "$D/mix" --resident attn_in,attn_out -o "$D/mixr.sfimg"
	for dt in q8 q4; do
		"$SF_BIN/sf-pack" -q --model "$D/mix" --resident attn_in,attn_out --dtype $dt \
			-o "$D/mix-$dt.sfimg"
	done
	head -c 700 "$SF_ROOT/man/sf-run.1" > "$D/text.txt"
	printf '%s\n' "$TEXT" > "$D/short.txt"
	probe_direct "$D/mix.sfimg"
	if "$PYTHON" -c 'import numpy' 2> /dev/null; then
		"$PYTHON" "$SF_ROOT/tests/oracle/hf_forward.py" write "$D/qwen2_moe" qwen2_moe 7 2
		"$SF_BIN/sf-pack" -q --model "$D/qwen2_moe" -o "$D/q.sfimg"
		"$SF_BIN/sf-pack" -q --model "$D/qwen2_moe" --resident attn_in,attn_out -o "$D/qr.sfimg"
		for a in gpt_oss gpt_oss_mxfp4; do
			"$PYTHON" "$SF_ROOT/tests/oracle/hf_forward.py" write "$D/$a" $a 7
			"$SF_BIN/sf-pack" -q --model "$D/$a" -o "$D/$a.sfimg"
			"$SF_BIN/sf-pack" -q --model "$D/$a" --resident attn_in,attn_out \
				-o "$D/$a-r.sfimg"
		done
		for dt in q8 q4; do
			"$SF_BIN/sf-pack" -q --model "$D/gpt_oss_mxfp4" --dtype $dt \
				-o "$D/gpt_oss_mxfp4-$dt.sfimg"
		done
	fi
}

teardown_file() {
	rm -rf "$D"
}

nll() { sf-run -q -ctk f32 -ctv f32 --ppl "$D/text.txt" --window 64 "$@" | jq .nll; }

within() {
	echo "nll: $1, dense $2"
	jq -n --argjson g "$1" --argjson w "$2" --argjson t "$NLL_TOL" -e '($g - $w | fabs) < $t'
}

gen() { sf-run -q -p "$TEXT" -n 12 --temp 0 --ignore-eos "$@"; }

@test "Mixtral, attention resident: the dense nll bit for bit from reads and --simulate, at any -b, in few expert slots" {
	local dense
	need_direct
	dense=$(nll -m "$D/mix")
	[ "$(nll "$D/mixr.sfimg")" = "$dense" ]
	[ "$(nll --simulate "$D/mixr.sfimg" -b 5)" = "$dense" ]
	[ "$(nll -b 7 -t 1 "$D/mixr.sfimg")" = "$dense" ]
	[ "$(nll -b 7 --cache-ratio 0.25 "$D/mixr.sfimg")" = "$dense" ]
	[ "$(nll -b 3 --cache-policy none --read-size 4096 "$D/mixr.sfimg")" = "$dense" ]
	[ "$(nll -b 7 --ram 200M "$D/mixr.sfimg")" = "$dense" ]
	[ "$(gen "$D/mixr.sfimg")" = "$(gen -m "$D/mix")" ]
}

# A pass of 7 tokens picks more experts than the 2 slots of no --ram hold,
# and a slot may keep an expert picked again that runs after a missing one.
@test "--dtype q8 and q4: experts as rows of blocks, near the dense nll, the same floats from reads, --simulate and any -b" {
	local dense got dt tol
	need_direct
	dense=$(nll -m "$D/mix")
	for dt in q8 q4; do
		sf-pack --info "$D/mix-$dt.sfimg" | jq -e --arg dt "${dt^^}" '.experts.dtype == $dt'
		got=$(nll "$D/mix-$dt.sfimg")
		tol=$([ $dt = q8 ] && echo 1e-3 || echo 1e-2)
		NLL_TOL=$tol within "$got" "$dense"
		[ "$(nll --simulate "$D/mix-$dt.sfimg")" = "$got" ]
		[ "$(nll -b 7 "$D/mix-$dt.sfimg")" = "$got" ]
		[ "$(nll -b 1 --cache-ratio 0.25 "$D/mix-$dt.sfimg")" = "$got" ]
	done
	# q8 rows hold the weights more closely than q4 rows
	jq -n --argjson a "$(nll "$D/mix-q8.sfimg")" --argjson b "$(nll "$D/mix-q4.sfimg")" \
		--argjson d "$dense" -e '($a - $d | fabs) < ($b - $d | fabs)'
}

@test "Mixtral, attention on flash: the nll within 2e-4 of the dense one, its greedy tokens, the same at any -b" {
	local dense got
	need_direct
	dense=$(nll -m "$D/mix")
	got=$(nll "$D/mix.sfimg")
	within "$got" "$dense"
	[ "$(nll -b 7 --cache-ratio 0.25 "$D/mix.sfimg")" = "$got" ]
	[ "$(nll --simulate "$D/mix.sfimg")" = "$got" ]
	[ "$(gen "$D/mix.sfimg")" = "$(gen -m "$D/mix")" ]
}

@test "--stats: each pick a hit or a read; every expert read once with room for all, ahead or when picked, or at start with --ram alone; without a cache the picks of a token, each pass" {
	need_direct
	sf-run -q -b 8 --ppl "$D/text.txt" --window 64 --cache-ratio 1 --stats "$D/all.json" \
		"$D/mixr.sfimg" > /dev/null
	jq -e '.experts | .count == 4 and .used == 2 and .slots == 8 and .hits + .misses == .uses
		and .misses + .read_ahead == 8 and .bytes_read == 8 * .record_bytes
		and .read_ahead > 0 and .read_ahead_used <= .read_ahead and .hit_rate > 0.5
		and .ahead_precision == .read_ahead_used / .read_ahead
		and .ahead_recall > 0 and .ahead_recall <= 1' "$D/all.json"
	# --prefetch 0: no reads ahead, each expert read when first picked
	sf-run -q -b 8 --ppl "$D/text.txt" --window 64 --cache-ratio 1 --prefetch 0 \
		--stats "$D/none.json" "$D/mixr.sfimg" > /dev/null
	jq -e '.experts | .read_ahead == 0 and .misses == 8 and .ahead_recall == 0' "$D/none.json"
	# no --ram, no --cache-ratio: no cache, a slot for each of a token's picks
	sf-run -q -b 8 --ppl "$D/text.txt" --window 64 --stats "$D/two.json" "$D/mixr.sfimg" > /dev/null
	jq -e '.experts | .slots == 2 and .hits + .misses == .uses and .misses > 8' "$D/two.json"
	# a pass reads a picked expert once for all its tokens; 2 picks a token and layer
	jq -e '.experts.misses <= .experts.uses and .experts.tokens_routed == 2 * 2 * .tokens' "$D/two.json"
	jq -e '.memory.experts >= 2 * .experts.record_bytes' "$D/two.json"
	# --ram with room for all: every expert read at start, none after
	sf-run -q -b 8 --ppl "$D/text.txt" --window 64 --ram 200M --stats "$D/held.json" \
		"$D/mixr.sfimg" > /dev/null
	jq -e '.experts | .slots == 8 and .loaded == 8 and .misses == 0 and .hits == .uses
		and .read_ahead == 0 and .bytes_read == 0' "$D/held.json"
}

@test "Qwen2-MoE (a gated shared expert, resident): the dense nll bit for bit with attention resident, within 2e-4 from flash; greedy tokens" {
	local dense
	"$PYTHON" -c 'import numpy' 2> /dev/null ||
		skip "no numpy for $PYTHON (apt install python3-numpy): no Qwen2-MoE checkpoint"
	need_direct
	dense=$(sf-run -q -ctk f32 -ctv f32 -m "$D/qwen2_moe" --ppl "$D/short.txt" --window 64 | jq .nll)
	[ "$(sf-run -q -ctk f32 -ctv f32 "$D/qr.sfimg" --ppl "$D/short.txt" --window 64 -b 5 \
	     --cache-ratio 0.1 | jq .nll)" = "$dense" ]
	within "$(sf-run -q -ctk f32 -ctv f32 "$D/q.sfimg" --ppl "$D/short.txt" --window 64 |
		  jq .nll)" "$dense"
	[ "$(gen -ctk f32 -ctv f32 "$D/q.sfimg")" = "$(gen -ctk f32 -ctv f32 -m "$D/qwen2_moe")" ]
	sf-pack --info "$D/q.sfimg" | jq -e '.experts.count == 4 and .model.arch == "Qwen2MoeForCausalLM"'
}

need_gpt_oss() {
	"$PYTHON" -c 'import numpy' 2> /dev/null ||
		skip "no numpy for $PYTHON (apt install python3-numpy): no gpt-oss checkpoint"
	need_direct
}

# The short text (44 tokens) passes the sliding layer's window of 4.
short_nll() { sf-run -q -ctk f32 -ctv f32 --ppl "$D/short.txt" --window 64 "$@" | jq .nll; }

@test "gpt-oss (fused F32 and MXFP4 experts): the dense nll bit for bit with attention resident, at any -b, --simulate, in few slots or all held (MXFP4 also with --activations q8); within 2e-4 from flash; greedy tokens; --info and --verify" {
	local a dense
	need_gpt_oss
	for a in gpt_oss gpt_oss_mxfp4; do
		dense=$(short_nll -m "$D/$a")
		[ "$(short_nll "$D/$a-r.sfimg")" = "$dense" ]
		[ "$(short_nll "$D/$a-r.sfimg" -b 7 -t 1 --cache-ratio 0.25)" = "$dense" ]
		[ "$(short_nll "$D/$a-r.sfimg" --simulate -b 5)" = "$dense" ]
		[ "$(short_nll "$D/$a-r.sfimg" -b 7 --ram 200M)" = "$dense" ]
		within "$(short_nll "$D/$a.sfimg")" "$dense"
		[ "$(gen -ctk f32 -ctv f32 "$D/$a.sfimg")" = "$(gen -ctk f32 -ctv f32 -m "$D/$a")" ]
		sf-pack --verify "$D/$a.sfimg"
		sf-pack --info "$D/$a.sfimg" | jq -e '.model.arch == "GptOssForCausalLM" and
			.experts.count == 4 and .experts.used == 2'
	done
	# MXFP4 kept as MXFP4 rows (17 bytes a block of 32 weights: gate
	# and up 32 x 64, down 64 x 32, 1,088 bytes each, the record on
	# 4 KiB where BF16 took 12 KiB and F32 takes 24), F32 kept as F32
	sf-pack --info "$D/gpt_oss_mxfp4.sfimg" | jq -e '.experts.dtype == "MXFP4" and
		.experts.record_bytes == 4096'
	sf-pack --info "$D/gpt_oss.sfimg" | jq -e '.experts.dtype == "F32"'
	# the experts' inputs rounded to 8 bits: the same from flash as dense
	dense=$(short_nll --activations q8 -m "$D/gpt_oss_mxfp4")
	[ "$dense" != "$(short_nll -m "$D/gpt_oss_mxfp4")" ]
	[ "$(short_nll --activations q8 "$D/gpt_oss_mxfp4-r.sfimg" -b 7 --ram 200M)" = "$dense" ]
}

@test "--stats: MXFP4 experts' products, f32 by default and q8 with --activations q8, from -m and from an image; none for F32 experts" {
	local f=$BATS_TEST_TMPDIR/stats.json
	need_gpt_oss
	gen -m "$D/gpt_oss_mxfp4" --stats "$f" > /dev/null
	jq -e '.experts.activations | .dtype == "MXFP4" and .type == "f32" and
		(.kernel | type) == "string"' "$f"
	gen -m "$D/gpt_oss_mxfp4" --activations q8 --stats "$f" > /dev/null
	jq -e '.experts.activations.type == "q8"' "$f"
	gen "$D/gpt_oss_mxfp4-r.sfimg" --activations q8 --stats "$f" > /dev/null
	jq -e '.experts.activations.type == "q8" and (.experts.hit_rate | type) == "number"' "$f"
	gen "$D/gpt_oss_mxfp4-r.sfimg" --stats "$f" > /dev/null
	jq -e '.experts.activations.type == "f32"' "$f"
	gen "$D/gpt_oss-r.sfimg" --stats "$f" > /dev/null
	jq -e '.experts.activations == null' "$f"
}

@test "gpt-oss MXFP4 --dtype q8 and q4: the experts keep their MXFP4 codes, attention's columns quantized, the same floats from reads, --simulate and any -b, q8 nearer the dense nll than q4" {
	local dense dt q8 q4 got
	need_gpt_oss
	dense=$(short_nll -m "$D/gpt_oss_mxfp4")
	for dt in q8 q4; do
		sf-pack --info "$D/gpt_oss_mxfp4-$dt.sfimg" | jq -e --arg dt "${dt^^}" \
			'.experts.dtype == "MXFP4" and .top_dtypes == [$dt]'
		got=$(short_nll "$D/gpt_oss_mxfp4-$dt.sfimg")
		[ "$(short_nll --simulate "$D/gpt_oss_mxfp4-$dt.sfimg")" = "$got" ]
		[ "$(short_nll -b 7 --cache-ratio 0.25 "$D/gpt_oss_mxfp4-$dt.sfimg")" = "$got" ]
		NLL_TOL=0.15 within "$got" "$dense"
	done
	q8=$(short_nll "$D/gpt_oss_mxfp4-q8.sfimg")
	q4=$(short_nll "$D/gpt_oss_mxfp4-q4.sfimg")
	jq -n --argjson a "$q8" --argjson b "$q4" --argjson d "$dense" -e '($a - $d | fabs) < ($b - $d | fabs)'
}

# gpt-oss's sliding layer holds a ring of window 4 + 64 - 1 rows at sf-run's
# -b 64, its full layer every position: f16 keys and values of 2 heads of
# 16, 128 bytes a row. --ram grants positions by what they cost, and the
# quarter of what it leaves that the KV cache gets holds twice as many
# positions as if the sliding layer held every one too.
@test "--ram counts a sliding layer's KV cache as its ring: the positions' bytes, the least's, a quarter's worth of positions" {
	local m=$BATS_TEST_TMPDIR/long least n
	need_gpt_oss
	sf-run -q -p "$TEXT" -n 2 --stats "$D/ring.json" "$D/gpt_oss.sfimg" > /dev/null
	jq -e '.memory.kv_positions == 256 and .memory.kv == (256 + 67) * 128' "$D/ring.json"
	sf-pack --info "$D/gpt_oss.sfimg" | jq -e '.ram.kv_positions == 128 and .ram.kv == (128 + 67) * 128'
	# a context of 32,768 positions, which the budget cannot all hold
	cp -r "$D/gpt_oss" "$m"
	jq '.max_position_embeddings = 32768' "$D/gpt_oss/config.json" > "$m/config.json"
	sf-pack -q --model "$m" -o "$m.sfimg"
	least=$(sf-pack --info "$m.sfimg" | jq .ram_at_least)
	sf-run -q -p "$TEXT" -n 2 --ram $((least + 2000000)) --stats "$D/ring.json" "$m.sfimg" > /dev/null
	jq -c .memory "$D/ring.json"
	n=$(jq .memory.kv_positions "$D/ring.json")
	[ "$n" -gt 1000 ] && [ "$n" -lt 32768 ]
	# the KV cache near a quarter of what --ram leaves the cache, the
	# held groups and it (an eighth were the ring's positions not counted)
	jq -e --argjson n "$n" --argjson ram $((least + 2000000)) '.memory |
		.kv == ($n + 67) * 128 and .kv / ($ram - .total + .kv + .held + .cache) > 0.2' \
		"$D/ring.json"
}

@test "sf-pack: --info names the experts, --verify reads them; a resident FFN refused; a cut image one line, exit 1" {
	sf-pack --verify "$D/mix.sfimg"
	sf-pack --info "$D/mix.sfimg" | jq -e '.version == 6 and .experts.count == 4 and
		.experts.used == 2 and .experts.dtype == "BF16" and .sizes.experts == 8 * .experts.record_bytes'
	run --separate-stderr sf-pack --model "$D/mix" --resident ffn_in -o "$BATS_TEST_TMPDIR/x.sfimg"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-pack: $D/mix/model.safetensors: --resident ffn_in or ffn_out: a mixture's FFN is its experts, which stay on flash" ]
	[ ! -e "$BATS_TEST_TMPDIR/x.sfimg" ]
	local cut=$BATS_TEST_TMPDIR/cut.sfimg size
	cp "$D/mix.sfimg" "$cut"
	size=$(stat -c %s "$cut")
	truncate -s $((size - 4096)) "$cut"
	run --separate-stderr sf-run -p hi -n 1 "$cut"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-run: $cut: region 'layer 1 experts' (bytes "*") extends past the end of the file ("*" bytes): truncated?" ]]
}

@test "a --ram too small names the expert slots in its figures" {
	run --separate-stderr sf-run -p hi -n 1 --ram 1M "$D/mix.sfimg"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-run: $D/mix.sfimg: --ram 1048576: "*", experts "*" (2 slots); give --ram "*" or more" ]]
}
