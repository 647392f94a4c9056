#!/usr/bin/env bash
# Seed corpora for the fuzz harnesses, made at fuzz time from the embedded
# model and the stages' real outputs (nothing binary is committed): a tiny
# model made by mkmodel with the embedded tokenizer (and Mixtrals), its trace, .sfc,
# placement.json, .sfq of both methods, calib.json and images, GGUF files
# from mkgguf, plus the small text seeds committed under tests/fuzz/seeds/.
# Usage: seeds.sh BIN_DIR FIXTURES_DIR OUT_DIR   (run from the repository)
set -euo pipefail
BIN=$1 FIX=$2 OUT=$3
ROOT=$(pwd)
MODEL=$ROOT/models/mix4-1m
W=$OUT/work

rm -rf "$OUT"
mkdir -p "$W"
for h in safetensors gguf config tokenizer binding corpus trace coact placement codes calib image; do
	mkdir -p "$OUT/$h"
	if [ -d "$ROOT/tests/fuzz/seeds/$h" ]; then cp "$ROOT/tests/fuzz/seeds/$h"/* "$OUT/$h/"; fi
done

# A model small enough that whole stage outputs stay a few KiB to a few
# hundred KiB, so that a fuzzer mutates them quickly.
"$FIX/mkmodel" -o "$W/tiny" --hidden 32 --intermediate 64 --layers 2 --heads 2 --kv-heads 1 \
	--vocab 1024 --max-pos 512 --tokenizer "$MODEL" >/dev/null
"$FIX/mkmodel" -o "$W/qwen" --arch qwen2 --no-tie --dtype f32 --hidden 16 --intermediate 32 \
	--layers 1 --heads 2 --kv-heads 1 --vocab 1024 --max-pos 32 --tokenizer "$MODEL" >/dev/null
cp "$W/tiny/model.safetensors" "$OUT/safetensors/tiny.safetensors"
cp "$W/qwen/model.safetensors" "$OUT/safetensors/qwen.safetensors"

# every metadata value type and every tensor type read; version 2 and a
# 64-byte alignment too
"$FIX/mkgguf" "$OUT/gguf/types.gguf"
"$FIX/mkgguf" "$OUT/gguf/v2-align64.gguf" 2 64
# a whole model with a tokenizer: what sf-run and sf-pack make of a file
"$FIX/mkgguf" --model "$OUT/gguf/model.gguf"
"$FIX/mkgguf" --moe "$OUT/gguf/moe.gguf"

cp "$MODEL/config.json" "$OUT/config/mix4-1m.json"
cp "$W/qwen/config.json" "$OUT/config/tiny-qwen2.json"

text="In the beginning God created the heaven and the earth."
{ cat "$MODEL/tokenizer.json"; printf '\0'; cat "$MODEL/tokenizer_config.json"; printf '\0%s' "$text"; } \
	>"$OUT/tokenizer/mix4-1m"
{ cat "$ROOT/tests/fixtures/bytelevel/tokenizer.json"; printf '\0';
  cat "$ROOT/tests/fixtures/bytelevel/tokenizer_config.json"; printf '\0%s' "$text"; } \
	>"$OUT/tokenizer/bytelevel"
# binding: config.json NUL tokenizer.json NUL tokenizer_config.json NUL text
for m in "$MODEL" "$W/qwen"; do
	{ cat "$m/config.json"; printf '\0'; cat "$m/tokenizer.json"; printf '\0';
	  cat "$m/tokenizer_config.json"; printf '\0%s' "$text"; } >"$OUT/binding/$(basename "$m")"
done

printf '\0%s\n\nAnd the earth was without form.\nAnd void.\n' "$text" >"$OUT/corpus/text"
printf '\1{"text": "%s"}\n{"text": "\\u00e9t\\u00e9\\n"}\n' "$text" >"$OUT/corpus/jsonl"
printf '\2{"instruction": "Say it.", "input": "%s", "output": "Done."}\n{"instruction": "a", "output": "b"}\n' \
	"$text" >"$OUT/corpus/alpaca"
printf '\3id,text\n1,"%s"\n2,"with ""quotes"", and\nnewlines"\n' "$text" >"$OUT/corpus/csv"

printf '%s\n\n%s\n' "$text" "And God said, Let there be light: and there was light." >"$W/a.txt"
"$BIN/sf-profile" -q -m "$W/tiny" --task kjv "$W/a.txt" -o "$W/density.sft"
"$BIN/sf-profile" -q -m "$W/tiny" --threshold 0.5 --layers 1-1 --groups ffn_out "$W/a.txt" \
	-o "$W/threshold.sft"
"$FIX/mkplanted" "$W/tiny" 100 1 "$W/planted.sft" "$W/planted.sfc"
cp "$W/density.sft" "$W/threshold.sft" "$W/planted.sft" "$OUT/trace/"

"$BIN/sf-coact" -q "$W/density.sft" -o "$W/density.sfc"
cp "$W/density.sfc" "$W/planted.sfc" "$OUT/coact/"

"$BIN/sf-place" -q --method coact "$W/planted.sfc" -o "$W/coact.json"
"$BIN/sf-place" -q --method frequency "$W/density.sfc" -o "$W/frequency.json"
cp "$W/coact.json" "$W/frequency.json" "$OUT/placement/"

# a mixture's experts slots, the second layer's with the step from the first
"$FIX/mkmodel" -o "$W/moe2" --arch mixtral --experts 4 --experts-used 2 --hidden 16 \
	--intermediate 32 --layers 2 --heads 2 --kv-heads 1 --vocab 1024 --max-pos 32 \
	--tokenizer "$MODEL" >/dev/null
"$BIN/sf-profile" -q -m "$W/moe2" "$W/a.txt" -o "$W/experts.sft"
"$BIN/sf-coact" -q "$W/experts.sft" -o "$W/experts.sfc"
"$BIN/sf-place" -q --method coact "$W/experts.sfc" -o "$W/experts.json"
cp "$W/experts.sft" "$OUT/trace/"
cp "$W/experts.sfc" "$OUT/coact/"
cp "$W/experts.json" "$OUT/placement/"

"$BIN/sf-encode" --model "$W/tiny" --method scalar -o "$W/scalar.sfq"
"$BIN/sf-encode" --model "$W/tiny" --method trellis -o "$W/trellis.sfq"
"$BIN/sf-encode" --model "$W/tiny" --method scalar --layers 1-1 -o "$W/layer1.sfq" 2>/dev/null ||
	true
cp "$W"/*.sfq "$OUT/codes/"

"$BIN/sf-encode" --model "$W/tiny" --calibrate --codes "$W/scalar.sfq" --corpus "$W/a.txt" \
	--budgets 0.3,0.6 --calib-tokens 16 --window 8 -o "$W/calib.json"
cp "$W/calib.json" "$OUT/calib/"

"$BIN/sf-pack" --model "$W/tiny" -o "$W/plain.sfimg"
"$BIN/sf-pack" --model "$W/tiny" --placement "$W/coact.json" --codes "$W/scalar.sfq" \
	--calib "$W/calib.json" --resident attention --dtype f16 -o "$W/full.sfimg"
"$BIN/sf-pack" --model "$W/qwen" -o "$W/qwen.sfimg"
"$BIN/sf-pack" --model "$W/tiny" --codes "$W/scalar.sfq" --dtype q4 -o "$W/q4.sfimg"
# a mixture: its experts' regions and header table
"$FIX/mkmodel" -o "$W/moe" --arch mixtral --experts 3 --experts-used 2 --hidden 16 \
	--intermediate 32 --layers 1 --heads 2 --kv-heads 1 --vocab 1024 --max-pos 32 \
	--tokenizer "$MODEL" >/dev/null
"$BIN/sf-pack" --model "$W/moe" -o "$W/moe.sfimg"
cp "$W"/*.sfimg "$OUT/image/"
rm -rf "$W"
