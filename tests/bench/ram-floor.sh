#!/usr/bin/env bash
# Every byte of RAM for the weights (issue 32), against llama.cpp in one
# run, on the models of tests/bench/vs-llamacpp.sh (the TinyLlama-1.1B
# shape, its GGUFs made by llama.cpp's own quantizer) and the shared
# mix4-5m:
#   sizes  the q4 and q8 images (sf-pack --dtype q4, q8: the embedding in
#          the matrices' type, the head in q6 and q8) against the Q4_0 and
#          Q8_0 files of the same weights
#   ppl    perplexity on the first PPL_TOKENS tokens of each mix4-5m test
#          split, windows of 256: the q4 and q8 images against the Q4_0 and
#          Q8_0 files in llama.cpp (the same token count on both sides,
#          checked); and sf-run --model with the KV cache in f16 and q8_0
#          against f32
#   rss    sf-run's peak resident set (--stats memory.peak_rss) decoding
#          NGEN tokens of the TinyLlama q4 image at -c 64 and at the model's
#          full context, page cache dropped, the same --ram
#   least  that image's least --ram (sf-pack --info ram_at_least) and its
#          share of the image; sf-run decoding NGEN tokens in a memory
#          cgroup of that figure plus 5% (page cache charged), and the
#          same run once more with --head-on-flash
#   7b     the Llama-2-7B shape (MHA, hidden 4096, 32 layers, vocab 32000;
#          tests/fixtures/mkmodel, 13.5 GB BF16) q4 image in a 1 GB memory
#          cgroup, sf-run's --ram RAM_7B (default 990000000): its full
#          default context against -c 512, decode tok/s, with OLD_BIN's
#          sf-run and image beside when given (the build before this
#          issue: its f32 KV cache and BF16 head)
# Writes summary.json under SF_BENCH_OUT and prints it.
#   tests/bench/ram-floor.sh [PARTS="sizes ppl rss least 7b"] [THREADS=2]
#       [NGEN=64] [PPL_TOKENS=4096] [SCRATCH=/var/tmp/sf-vs-llamacpp]
#       [SCRATCH_7B=/var/tmp/sf-7b-q4] [OLD_BIN=DIR] [RAM_7B=990000000] [REPEATS=3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=$root/bin:$PATH
. "$root/tests/bench/llamacpp.bash"
. "$root/tests/bench/flash-lib.bash"

PARTS=${PARTS:-sizes ppl rss least 7b}
THREADS=${THREADS:-2}
NGEN=${NGEN:-64}
PPL_TOKENS=${PPL_TOKENS:-4096}
REPEATS=${REPEATS:-3}
RAM_7B=${RAM_7B:-990000000}
scratch=${SCRATCH:-/var/tmp/sf-vs-llamacpp}
scratch7=${SCRATCH_7B:-/var/tmp/sf-7b-q4}
out=${SF_BENCH_OUT:-$root/build/bench/ram-floor}
shared=${SF_SHARED:-$root/../shared}
mix=$shared/models/mix4-5m
mkdir -p "$out" "$scratch/mix"
log() { echo "ram-floor: $*" >&2; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
json() { echo "$1" >> "$out/parts.jsonl"; }
: > "$out/parts.jsonl"

llamacpp_setup "${LLAMACPP_DIR:-/var/tmp/sf-llamacpp}"
if has sizes || has rss || has least; then
	[ -f "$scratch/model/config.json" ] && [ -f "$scratch/Q4_0.gguf" ] ||
		{ log "run tests/bench/vs-llamacpp.sh first (the model and its GGUFs)"; exit 1; }
	for dt in q4 q8; do	# packed by this build
		[ "$(sf-pack --info "$scratch/$dt.sfimg" 2>/dev/null | jq .version)" = 4 ] ||
			sf-pack -q --model "$scratch/model" --dtype "$dt" -o "$scratch/$dt.sfimg"
	done
fi
img=$scratch/q4.sfimg
drop_all() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }

if has sizes; then
	for p in "q4 Q4_0" "q8 Q8_0"; do
		set -- $p
		a=$(stat -c %s "$scratch/$1.sfimg") b=$(stat -c %s "$scratch/$2.gguf")
		json "{\"part\": \"sizes\", \"image\": \"$1\", \"bytes\": $a, \"gguf\": \"$2\", \"gguf_bytes\": $b, \"ratio\": $(jq -n "$a / $b")}"
		log "sizes: $1 image $a bytes, $2 file $b: $(jq -n "$a / $b")"
	done
fi

if has ppl; then
	g=$scratch/mix
	[ -f "$g/bf16.gguf" ] || llamacpp_gguf "$mix" "$g/bf16.gguf" bf16
	for t in Q4_0 Q8_0; do
		[ -f "$g/$t.gguf" ] || llamacpp_quantize "$g/bf16.gguf" "$g/$t.gguf" "$t" >/dev/null
	done
	for dt in q4 q8; do sf-pack -q --model "$mix" --dtype "$dt" -o "$g/$dt.sfimg"; done
	for genre in kjv fortunes gcide man; do
		f=$shared/data/mix4/$genre.test.txt
		for p in "q4 Q4_0" "q8 Q8_0"; do
			set -- $p
			a=$(sf-run -t "$THREADS" --ppl "$f" --max-tokens "$PPL_TOKENS" "$g/$1.sfimg")
			b=$(llamacpp_ppl "$g/$2.gguf" "$THREADS" "$f" "$PPL_TOKENS" 256)
			[ "$(jq .tokens <<< "$a")" = "$(jq .tokens <<< "$b")" ] ||
				{ log "$genre: token counts differ: $(jq .tokens <<< "$a") $(jq .tokens <<< "$b")"; exit 1; }
			json "{\"part\": \"ppl\", \"genre\": \"$genre\", \"image\": \"$1\", \"ppl\": $(jq .ppl <<< "$a"), \"gguf\": \"$2\", \"gguf_ppl\": $(jq .ppl <<< "$b"), \"tokens\": $(jq .tokens <<< "$a")}"
		done
		for kv in f32 f16 q8_0; do
			a=$(sf-run -t "$THREADS" -ctk $kv -ctv $kv --ppl "$f" --max-tokens "$PPL_TOKENS" --model "$mix")
			json "{\"part\": \"kv\", \"genre\": \"$genre\", \"kv\": \"$kv\", \"ppl\": $(jq .ppl <<< "$a")}"
		done
		log "ppl: $genre done"
	done
fi

if has rss; then
	for ctx in 64 full; do
		c=(); [ "$ctx" = full ] || c=(-c 64)
		drop_all "$img"
		sf-run "${c[@]}" -p "In the beginning" -n $((NGEN - 8)) --ignore-eos --temp 0 \
			-t "$THREADS" --ram 4G --stats "$out/rss-$ctx.json" "$img" > /dev/null
		json "{\"part\": \"rss\", \"context\": \"$ctx\", \"peak_rss\": $(jq .memory.peak_rss "$out/rss-$ctx.json"), \"kv_positions\": $(jq .memory.kv_positions "$out/rss-$ctx.json"), \"tg\": $(jq .decode_tokens_per_second "$out/rss-$ctx.json")}"
		log "rss at $ctx: $(jq .memory.peak_rss "$out/rss-$ctx.json")"
	done
fi

if has least; then
	flash_cgroup sf-ram-floor
	trap '[ -z "${cg:-}" ] || rmdir "$cg" 2>/dev/null || true' EXIT
	least=$(sf-pack --info "$img" | jq .ram_at_least)
	size=$(stat -c %s "$img")
	for head in ram flash; do
		h=(); [ "$head" = ram ] || h=(--head-on-flash)
		l=$least
		# the refusal of a budget too small names the least one
		[ "$head" = ram ] || l=$( { sf-run "${h[@]}" --ram 1M -p x "$img" 2>&1 || true; } |
					 sed -n 's/.*give --ram \([0-9]*\) or more.*/\1/p')
		drop_all "$img"
		r=$(capped $((l * 105 / 100)) sf-run "${h[@]}" -p "In the beginning" -n "$NGEN" \
			--ignore-eos --temp 0 -t "$THREADS" --ram "$l" --bench "$img" 2>/dev/null) || r='{}'
		json "{\"part\": \"least\", \"head\": \"$head\", \"ram_at_least\": $l, \"image_bytes\": $size, \"share\": $(jq -n "$l / $size"), \"cgroup\": $((l * 105 / 100)), \"decoded\": $(jq '.decode_tokens // 0' <<< "$r"), \"tg\": $(jq '.tg // 0' <<< "$r"), \"peak_rss\": $(jq '.memory.peak_rss // 0' <<< "$r")}"
		log "least (head in $head): $l bytes, $(jq -n "$l / $size") of the image; in a cgroup of +5%: $(jq -c '{decode_tokens, tg}' <<< "$r")"
	done
fi

if has 7b; then
	m7=$scratch7/model
	if ! [ -f "$m7/config.json" ]; then
		log "making the 7B-shape model (13.5 GB)"
		"$root/build/opt/fixtures/mkmodel" -o "$m7.tmp" --hidden 4096 --intermediate 11008 \
			--layers 32 --heads 32 --kv-heads 32 --vocab 32000 --max-pos 4096 --no-tie \
			--tokenizer "$root/models/mix4-1m" >/dev/null
		mv "$m7.tmp" "$m7"
	fi
	[ "$(sf-pack --info "$scratch7/q4.sfimg" 2>/dev/null | jq .version)" = 4 ] ||
		sf-pack -q --model "$m7" --dtype q4 -o "$scratch7/q4.sfimg"
	if [ -n "${OLD_BIN:-}" ] && ! [ -f "$scratch7/q4-old.sfimg" ]; then
		"$OLD_BIN/sf-pack" -q --model "$m7" --dtype q4 -o "$scratch7/q4-old.sfimg"
	fi
	[ -n "${cg:-}" ] || flash_cgroup sf-ram-floor
	trap '[ -z "${cg:-}" ] || rmdir "$cg" 2>/dev/null || true' EXIT
	runs=("new full" "new 512")
	[ -z "${OLD_BIN:-}" ] || runs+=("old 512")
	for r in $(seq 1 "$REPEATS"); do
		for x in "${runs[@]}"; do
			set -- $x
			bin=$root/bin i=$scratch7/q4.sfimg c=()
			[ "$1" = new ] || bin=$OLD_BIN i=$scratch7/q4-old.sfimg
			[ "$2" = full ] || c=(-c 512)
			drop_all "$i"
			res=$(capped 1000000000 "$bin/sf-run" "${c[@]}" -p "In the beginning" -n 16 \
				--ignore-eos --temp 0 -t "$THREADS" --ram "$RAM_7B" --bench "$i" 2>"$out/7b.err") ||
				{ log "7b $x: $(tail -1 "$out/7b.err")"; res='{}'; }
			json "{\"part\": \"7b\", \"build\": \"$1\", \"context\": \"$2\", \"round\": $r, \"tg\": $(jq '.tg // 0' <<< "$res"), \"kv_positions\": $(jq '.memory.kv_positions // 0' <<< "$res"), \"peak_rss\": $(jq '.memory.peak_rss // 0' <<< "$res")}"
			log "7b round $r, $x: $(jq -c '{tg, kv: .memory.kv_positions}' <<< "$res")"
		done
	done
fi

jq -s --arg date "$(date -u +%F)" --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
	--argjson threads "$THREADS" '{date: $date, cpu: $cpu, threads: $threads, parts: .}' \
	"$out/parts.jsonl" > "$out/summary.json"
jq -c '.parts[]' "$out/summary.json"
log "in $out/summary.json"
