#!/usr/bin/env bash
# sparseflash against llama.cpp on the same weights (issue 31's table):
# the TinyLlama-1.1B shape (hidden 2048, intermediate 5632, 22 layers,
# 32/4 heads, vocab 32000, untied, BF16, 2.2 GB; tests/fixtures/mkmodel
# with mix4-1m's tokenizer), converted to a BF16 GGUF (tests/bench/
# llamacpp.bash) and quantized by llama.cpp's own quantizer to Q4_0 and
# Q8_0; packed by sf-pack as q4, q8 and BF16 images. The same prompt
# text (the same ids: checked), -t THREADS, greedy, both sides in one
# run, the configurations interleaved in each of REPEATS rounds, the
# page cache of every file dropped before each run, medians:
#   ram    decode and a PROMPT-token prompt with everything in RAM:
#          llama.cpp Q4_0 repacked and plain (--no-repack), Q8_0, BF16;
#          sf-run q4 and q8 images at budget 1 with --ram RAM_ALL (every
#          group held whole), the BF16 image from its cache (--seg-admit
#          1) and the dense engine (--model)
#   cgroup the q4 image at budget 1 against Q4_0 (plain, and repacked
#          where it runs) in memory cgroups of CGROUPS bytes (sf-run's
#          --ram 95% of it), cold cache; fio's reads of the image in the
#          same round
# SHAPE=mixtral instead: a Mixtral of 8 experts, 2 a token (hidden 2048,
# experts of 5632, 16 layers, 32/8 heads, vocab 32000, BF16, 9.0 GB;
# issue 33's speed study), its Q4_0 by llama.cpp's quantizer and sf-pack's
# q4 image only (the BF16 GGUF is removed once quantized, for the disk);
# ram adds nothing but sf-run --model on the Q4_0 file (sf-q4-gguf), and
# the default cgroup is 25% of the q4 image.
# SHAPE=gpt-oss: gpt-oss's layout (hidden 2880, 64/8 heads of 64, 32
# experts of 2880, 4 a token, sliding window 128 every other layer, YaRN)
# in 8 layers with the byte-level vocabulary of tests/oracle (268), its
# experts in MXFP4 as the released checkpoints (tests/oracle/hf_forward.py
# writes it), converted to a GGUF with BF16 attention (hf2gguf.py: 4.0 GB)
# that both sides run, sparseflash also as an image packed from that GGUF
# (MXFP4 experts kept, BF16 attention columns), in RAM also with
# --activations q8 (sf-q4-int8: the experts' inputs rounded to 8 bits as
# llama.cpp's are); the default cgroup is 25% of the image.
# SHAPE=gemma3: Gemma 3 1B's shape (hidden 1152, intermediate 6912, 26
# layers, 4/1 heads of 256, vocab 262144 tied, sliding layers of 512 five
# in six; tests/fixtures/mkmodel --arch gemma3, BF16, 2.0 GB), its Q4_0 by
# llama.cpp's quantizer and sf-pack's q4 image; ram as the mixture's; the
# default cgroup is 25% of the q4 image.
# SHAPE=gemma2: Gemma 2 2B's shape (hidden 2304, intermediate 9216, 26
# layers, 8/4 heads of 256, vocab 256000 tied, every other layer sliding
# by 4096, soft-capped scores and logits; mkmodel --arch gemma2, BF16,
# 5.2 GB), as gemma3.
# Every shape also runs sf-run --model on llama.cpp's 4-bit file in RAM.
# Writes runs.csv (config,where,round,pp,tg,busy: sf-run's decode_busy
# averaged over its threads; expert_hit, ahead_precision, ahead_recall: a
# mixture's expert cache hit rate, and the share of its next layer's
# experts read ahead that were picked, and of the picks not held that were
# read ahead) and summary.json (medians and the
# issue's ratios) under SF_BENCH_OUT; prints the table.
#   tests/bench/vs-llamacpp.sh [SHAPE=tinyllama|mixtral|gpt-oss|gemma3|gemma2] [PARTS="ram cgroup"] [REPEATS=3] [THREADS=2]
#       [PROMPT=512] [NGEN=64] [CGROUPS="660000000 330000000"]
#       [SCRATCH=/var/tmp/sf-vs-llamacpp] [LLAMACPP_DIR=/var/tmp/sf-llamacpp] [QUICK=1]
#       [CGROUP_REPACK=0: no repacked llama.cpp in the cgroups]
#       [ISA=avx2: both sides on AVX2 alone, as a laptop without AVX-512:
#        sf-run under SF_ISA=avx2, llama.cpp with its haswell CPU backend]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=$root/bin:$PATH
. "$root/tests/bench/llamacpp.bash"
. "$root/tests/bench/flash-lib.bash"

SHAPE=${SHAPE:-tinyllama}
tie=(--no-tie)
PARTS=${PARTS:-ram cgroup}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-512}
NGEN=${NGEN:-64}
RAM_ALL=${RAM_ALL:-4000000000}
case $SHAPE in
tinyllama)
	CGROUPS=${CGROUPS:-660000000 330000000}
	scratch=${SCRATCH:-/var/tmp/sf-vs-llamacpp}
	out=${SF_BENCH_OUT:-$root/build/bench/vs-llamacpp}
	arch=()
	shape=(--hidden 2048 --intermediate 5632 --layers 22 --heads 32 --kv-heads 4 --vocab 32000)
	ggufs=(Q4_0 Q8_0) dtypes=(q4 q8 bf16) quant=() g4=Q4_0 i4=q4 ;;
mixtral)
	scratch=${SCRATCH:-/var/tmp/sf-vs-llamacpp-mixtral}
	out=${SF_BENCH_OUT:-$root/build/bench/vs-llamacpp-mixtral}
	arch=(--arch mixtral --experts 8 --experts-used 2)
	shape=(--hidden 2048 --intermediate 5632 --layers 16 --heads 32 --kv-heads 8 --vocab 32000)
	# round to nearest, as llama.cpp's Q4_0: the least-squares search
	# takes half an hour over 4.4 billion expert weights on 2 cores
	ggufs=(Q4_0) dtypes=(q4) RAM_ALL=${RAM_ALL_MIXTRAL:-8000000000} quant=(--quant rtn)
	g4=Q4_0 i4=q4 ;;
gpt-oss)
	scratch=${SCRATCH:-/var/tmp/sf-vs-llamacpp-gptoss}
	out=${SF_BENCH_OUT:-$root/build/bench/vs-llamacpp-gptoss}
	shape=(hidden_size=2880 intermediate_size=2880 num_hidden_layers=8 num_attention_heads=64
	       num_key_value_heads=8 head_dim=64 num_local_experts=32 num_experts_per_tok=4
	       sliding_window=128 max_position_embeddings=4096)
	ggufs=() dtypes=() RAM_ALL=${RAM_ALL_GPTOSS:-8000000000} g4=MXFP4 i4=mx ;;
gemma3)
	scratch=${SCRATCH:-/var/tmp/sf-vs-llamacpp-gemma3}
	out=${SF_BENCH_OUT:-$root/build/bench/vs-llamacpp-gemma3}
	arch=(--arch gemma3 --head-dim 256) tie=(--tie)
	shape=(--hidden 1152 --intermediate 6912 --layers 26 --heads 4 --kv-heads 1 --vocab 262144)
	ggufs=(Q4_0) dtypes=(q4) quant=() g4=Q4_0 i4=q4 ;;
gemma2)
	scratch=${SCRATCH:-/var/tmp/sf-vs-llamacpp-gemma2}
	out=${SF_BENCH_OUT:-$root/build/bench/vs-llamacpp-gemma2}
	arch=(--arch gemma2 --head-dim 256) tie=(--tie)
	shape=(--hidden 2304 --intermediate 9216 --layers 26 --heads 8 --kv-heads 4 --vocab 256000)
	ggufs=(Q4_0) dtypes=(q4) quant=() g4=Q4_0 i4=q4 ;;
*) echo "vs-llamacpp: SHAPE=$SHAPE: tinyllama, mixtral, gpt-oss, gemma3 or gemma2" >&2; exit 2 ;;
esac
if [ -n "${QUICK:-}" ] && [ "$SHAPE" = gpt-oss ]; then
	shape=(hidden_size=512 intermediate_size=512 num_hidden_layers=2 num_attention_heads=8
	       num_key_value_heads=2 head_dim=64 num_local_experts=8 num_experts_per_tok=2
	       sliding_window=128 max_position_embeddings=1024)
	scratch=$scratch-quick CGROUPS=${CGROUPS_QUICK:-10000000} PROMPT=64 NGEN=16 REPEATS=1
elif [ -n "${QUICK:-}" ]; then
	shape=(--hidden 512 --intermediate 1376 --layers 4 --heads 8 --kv-heads 2 --vocab 4096)
	scratch=$scratch-quick CGROUPS=${CGROUPS_QUICK:-40000000} PROMPT=64 NGEN=16 REPEATS=1
fi
mkdir -p "$scratch" "$out"
log() { echo "vs-llamacpp: $*" >&2; }

ISA=${ISA:-}
case $ISA in
'') ;;
avx2) export SF_ISA=avx2 LLAMACPP_CPU=haswell ;;
*) log "ISA=$ISA: only avx2 (both sides' AVX2 kernels)"; exit 2 ;;
esac
llamacpp_setup "${LLAMACPP_DIR:-/var/tmp/sf-llamacpp}"

# --- the model, its GGUFs and images, made once
m=$scratch/model
if ! [ -f "$m/config.json" ] && [ "$SHAPE" = gpt-oss ]; then
	log "making the model: gpt-oss, ${shape[*]}, MXFP4 experts"
	"$LLAMACPP_PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import hf_forward as h
s = h.SHAPES["gpt_oss_mxfp4"]
s.update(swiglu_limit=7.0, rope_scaling=dict(s["rope_scaling"], truncate=True),
         layer_types=None, **{k: int(v) for k, v in (a.split("=") for a in sys.argv[3:])})
h.write(sys.argv[2], "gpt_oss_mxfp4", 7)' "$root/tests/oracle" "$m.tmp" "${shape[@]}"
	mv "$m.tmp" "$m"
elif ! [ -f "$m/config.json" ]; then
	log "making the model: ${arch[*]} ${shape[*]}"
	# untied as TinyLlama and Mixtral; Gemma ties its head
	"$root/build/opt/fixtures/mkmodel" -o "$m.tmp" "${arch[@]}" "${shape[@]}" --max-pos 2048 \
		"${tie[@]}" --tokenizer "$root/models/mix4-1m" >/dev/null
	mv "$m.tmp" "$m"
fi
if [ "$SHAPE" = gpt-oss ]; then
	[ -f "$scratch/MXFP4.gguf" ] || llamacpp_gguf "$m" "$scratch/MXFP4.gguf" bf16
	[ -f "$scratch/mx.sfimg" ] || sf-pack -q --model "$scratch/MXFP4.gguf" -o "$scratch/mx.sfimg"
fi
for t in "${ggufs[@]}"; do
	[ -f "$scratch/$t.gguf" ] && continue
	[ -f "$scratch/bf16.gguf" ] || llamacpp_gguf "$m" "$scratch/bf16.gguf" bf16
	llamacpp_quantize "$scratch/bf16.gguf" "$scratch/$t.gguf" "$t" >/dev/null
done
[ "$SHAPE" = mixtral ] && rm -f "$scratch/bf16.gguf"
for dt in "${dtypes[@]}"; do
	[ -f "$scratch/$dt.sfimg" ] || sf-pack -q --model "$m" --dtype "${dt/bf16/keep}" "${quant[@]}" \
		-o "$scratch/$dt.sfimg"
done
# the mixture's cgroup: a quarter of its 4-bit image
[ -z "${CGROUPS:-}" ] && CGROUPS=$(($(stat -c %s "$scratch/$i4.sfimg") / 4))
files=("$scratch"/*.gguf "$scratch"/*.sfimg "$m"/model.safetensors)
drop_all() { for f in "${files[@]}"; do dd if="$f" iflag=nocache count=0 status=none; done; }

# --- the prompt: the same ids on both sides
img=$scratch/$i4.sfimg
text=$(prompt_of "$PROMPT" "$scratch")
sf_ids=$(sf-run "$img" -f "$text" -n 0 --verbose-prompt -t 1 2>&1 >/dev/null |
	 sed -n 's/^ *\([0-9][0-9]*\) -> .*/\1/p' | paste -sd, -)
llamacpp_tokenize "$scratch/$g4.gguf" "$(cat "$text")" > "$scratch/ids.json"
ntok=$(jq length "$scratch/ids.json")
if [ "$sf_ids" != "$(jq -r 'map(tostring) | join(",")' "$scratch/ids.json")" ]; then
	log "the prompt's ids differ: sparseflash ${sf_ids:0:60}..., llama.cpp" \
	    "$(jq -c '.[0:12]' "$scratch/ids.json")..."
	exit 1
fi
log "prompt: $ntok tokens, the same ids on both sides"

# --- one run of a configuration: "pp,tg"
sf() {	# RAM ARGS...: sf-run, capped by RAM (0: not)
	local ram=$1
	shift
	# -c: the context llama.cpp's side is given (the prompt and the tokens
	# generated), whose KV cache --ram then holds, not the model's whole
	local cmd=(sf-run "$@" -f "$text" -n "$NGEN" -c $((ntok + NGEN)) --temp 0 --ignore-eos
		   -t "$THREADS" --bench)
	if [ "$ram" = 0 ]; then "${cmd[@]}"; else capped "$ram" "${cmd[@]}"; fi 2>/dev/null |
		jq -r '"\(.pp),\(.tg),\(.decode_busy | add / length),\(.experts.hit_rate // ""),\(.experts.ahead_precision // ""),\(.experts.ahead_recall // "")"'
}
lc() {	# RAM GGUF: llama.cpp, capped by RAM (0: not); 0,0 when it fails (killed)
	local ram=$1 r
	shift
	if [ "$ram" = 0 ]; then
		r=$(llamacpp_decode "$1" "$THREADS" "$NGEN" "$scratch/ids.json" 2>/dev/null) || r=
	else
		r=$(capped "$ram" "$LLAMACPP_BIN" $(llamacpp_opts) decode "$1" "$THREADS" "$NGEN" \
			"$scratch/ids.json" 2>/dev/null) || r=
	fi
	[ -n "$r" ] && jq -r '"\(.prompt_tokens_per_second),\(.decode_tokens_per_second),,,,"' <<< "$r" ||
		echo "0,0,,,,"
}

configs=()
for p in $PARTS; do
	case $p in
	ram) if [ "$SHAPE" = gpt-oss ]; then
		configs+=("ram lc-q4-repack" "ram lc-q4-plain" "ram sf-q4" "ram sf-q4-int8"
			  "ram sf-q4-gguf")
	     elif [ "$SHAPE" = mixtral ] || [ "$SHAPE" = gemma3 ] || [ "$SHAPE" = gemma2 ]; then
		configs+=("ram lc-q4-repack" "ram lc-q4-plain" "ram sf-q4" "ram sf-q4-gguf" "ram sf-dense")
	     else
		configs+=("ram lc-q4-repack" "ram lc-q4-plain" "ram lc-q8" "ram lc-bf16" "ram sf-q4"
			  "ram sf-q4-gguf" "ram sf-q8" "ram sf-bf16-cache" "ram sf-dense")
	     fi ;;
	cgroup) for c in $CGROUPS; do
			configs+=("$c lc-q4-plain")
			# repacking copies the weights into anonymous memory: in a
			# cgroup below the file it thrashes until killed (minutes)
			[ "${CGROUP_REPACK:-1}" = 1 ] && configs+=("$c lc-q4-repack")
			configs+=("$c sf-q4")
		done ;;
	*) log "unknown part $p"; exit 2 ;;
	esac
done
[ -z "${cg:-}" ] && [[ " $PARTS " == *" cgroup "* ]] && flash_cgroup sf-vs-llamacpp
trap '[ -z "${cg:-}" ] || rmdir "$cg" 2>/dev/null || true' EXIT

run_config() {	# WHERE NAME
	local where=$1 name=$2 ram=0 sfram=$RAM_ALL
	if [ "$where" != ram ]; then
		ram=$where
		sfram=$((where * 95 / 100))
	fi
	case $name in
	lc-q4-repack) LLAMACPP_REPACK=1 lc "$ram" "$scratch/$g4.gguf" ;;
	lc-q4-plain) LLAMACPP_REPACK=0 lc "$ram" "$scratch/$g4.gguf" ;;
	lc-q8) lc "$ram" "$scratch/Q8_0.gguf" ;;
	lc-bf16) lc "$ram" "$scratch/bf16.gguf" ;;
	sf-q4) sf "$ram" "$scratch/$i4.sfimg" --ram "$sfram" ;;
	sf-q4-int8) sf "$ram" "$scratch/$i4.sfimg" --ram "$sfram" --activations q8 ;;
	sf-q8) sf "$ram" "$scratch/q8.sfimg" --ram "$sfram" ;;
	sf-bf16-cache) sf "$ram" "$scratch/bf16.sfimg" --ram "$sfram" --seg-admit 1 ;;
	sf-q4-gguf) sf "$ram" --model "$scratch/$g4.gguf" ;;
	sf-dense) sf "$ram" --model "$m" ;;
	esac
}

echo "config,where,round,pp,tg,busy,expert_hit,ahead_precision,ahead_recall" > "$out/runs.csv"
: > "$out/device.csv"
for r in $(seq 1 "$REPEATS"); do
	if [[ " $PARTS " == *" cgroup "* ]]; then
		drop_all
		gbs=$(fio --name=f --filename="$scratch/$i4.sfimg" --readonly --output-format=json \
			--direct=1 --rw=read --bs=256k --iodepth=32 --ioengine=io_uring --runtime=4 \
			--time_based=0 --size=100% | jq '.jobs[0].read.bw_bytes / 1e9')
		echo "$r,$gbs" >> "$out/device.csv"
	fi
	for c in "${configs[@]}"; do
		set -- $c
		drop_all
		res=$(run_config "$1" "$2")
		echo "$2,$1,$r,$res" >> "$out/runs.csv"
		log "round $r: $2 at $1: pp,tg,busy $res"
	done
done

# --- medians and the issue's ratios
med() {	# NAME WHERE COLUMN(4 pp, 5 tg, 6 busy: sf-run's threads' mean share of the decode computing)
	awk -F, -v n="$1" -v w="$2" -v c="$3" '$1 == n && $2 == w && $c != "" { print $c }' \
		"$out/runs.csv" | median
}
{
	echo "{"
	echo "\"date\": \"$(date -u +%F)\", \"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\","
	echo "\"isa\": \"${ISA:-best}\","
	echo "\"threads\": $THREADS, \"prompt_tokens\": $ntok, \"generated\": $NGEN, \"repeats\": $REPEATS,"
	echo "\"device_gbs\": [$(cut -d, -f2 "$out/device.csv" | paste -sd,)],"
	echo "\"medians\": ["
	sep=
	for c in "${configs[@]}"; do
		set -- $c
		b=$(med "$2" "$1" 6)
		h=$(med "$2" "$1" 7)
		ap=$(med "$2" "$1" 8)
		ar=$(med "$2" "$1" 9)
		echo "$sep{\"config\": \"$2\", \"where\": \"$1\", \"pp\": $(med "$2" "$1" 4), \"tg\": $(med "$2" "$1" 5), \"busy\": ${b:-null}, \"expert_hit\": ${h:-null}, \"ahead_precision\": ${ap:-null}, \"ahead_recall\": ${ar:-null}}"
		sep=,
	done
	echo "]}"
} > "$out/summary.json"
jq -r '.medians[] | [.where, .config, (.pp * 10 | round / 10), (.tg * 100 | round / 100),
	(if .busy then "busy \(.busy * 100 | round)%" else "" end),
	(if .expert_hit then "expert hits \(.expert_hit * 100 | round)%" else "" end),
	(if .ahead_precision then "read ahead: precision \(.ahead_precision * 100 | round)%, recall \(.ahead_recall * 100 | round)%" else "" end)] | @tsv' \
	"$out/summary.json" | column -t
ratio() {	# WHERE A B COLUMN: median A over median B
	jq -r --arg w "$1" --arg a "$2" --arg b "$3" --arg c "$4" '
		[.medians[] | select(.where == $w)] as $m |
		($m[] | select(.config == $a) | .[$c]) as $x |
		($m[] | select(.config == $b) | .[$c]) as $y |
		if $y > 0 then ($x / $y * 100 | round / 100) else "n/a" end' "$out/summary.json"
}
if [[ " $PARTS " == *" ram "* ]]; then
	echo "in RAM, decode: --model $g4.gguf/best $g4 $(ratio ram sf-q4-gguf lc-q4-repack tg)" \
	     "(repacked) $(ratio ram sf-q4-gguf lc-q4-plain tg) (plain)"
	echo "in RAM, decode: $i4 image/best $g4 $(ratio ram sf-q4 lc-q4-repack tg) (repacked)" \
	     "$(ratio ram sf-q4 lc-q4-plain tg) (plain); q8/Q8_0 $(ratio ram sf-q8 lc-q8 tg);" \
	     "BF16 image/dense engine $(ratio ram sf-bf16-cache sf-dense tg)"
	echo "prompt: dense engine/llama.cpp BF16 $(ratio ram sf-dense lc-bf16 pp);" \
	     "$i4 image/$g4 $(ratio ram sf-q4 lc-q4-repack pp) (repacked) $(ratio ram sf-q4 lc-q4-plain pp) (plain)"
	[ "$SHAPE" = gpt-oss ] && echo "--activations q8: $i4 image/$g4 decode" \
		"$(ratio ram sf-q4-int8 lc-q4-repack tg), prompt $(ratio ram sf-q4-int8 lc-q4-repack pp)" \
		"(repacked)"
fi
for c in $CGROUPS; do
	[[ " $PARTS " == *" cgroup "* ]] || break
	echo "cgroup $c: $i4 image/$g4 $(ratio "$c" sf-q4 lc-q4-plain tg) (plain)" \
	     "$(ratio "$c" sf-q4 lc-q4-repack tg) (repacked)"
done
log "runs in $out/runs.csv, medians in $out/summary.json"
