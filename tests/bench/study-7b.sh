#!/usr/bin/env bash
# Study 6, the decoder at the Llama-2-7B shape from flash (issue 20): a
# random model of the full shape (hidden 4096, intermediate 11008, 32
# layers, 32 heads over KV_HEADS KV heads (default 32; 8 for the GQA
# variant), vocab 32,000, untied, BF16, 13.5 GB; tests/fixtures/mkmodel)
# packed in a scratch directory without codes, then sf-run IMAGE with
# --ram at RAMS percent of the model's bytes (default "25 15"), inside a
# child memory cgroup of that size where the v1 controller is writable (the
# page cache charged to it), at budget 1 and TEAL density 0.5: a prompt
# of PROMPT_TOKENS tokens (default 64) in one pass of -b, then N tokens
# (default 8), -t THREADS (default 2). Per run: decode tok/s, time to
# first token, bytes and requests per token, peak RSS against --ram;
# beside fio's O_DIRECT 256 KiB reads of the image at depth 32. Random
# weights: the I/O and memory side only, not quality.
#   tests/bench/study-7b.sh [SCRATCH=/var/tmp/sf-7b] [REPEATS=1] [KEEP=1]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
fixtures=${SF_FIXTURES:-$root/build/opt/fixtures}
scratch=${SCRATCH:-/var/tmp/sf-7b}
out=${SF_BENCH_OUT:-$root/build/bench/study-7b}
REPEATS=${REPEATS:-1}
N=${N:-8}
THREADS=${THREADS:-2}
KV_HEADS=${KV_HEADS:-32}
PROMPT_TOKENS=${PROMPT_TOKENS:-64}
RAMS=${RAMS:-25 15}
export PATH=$bin:$PATH
log() { echo "study-7b: $*" >&2; }
. "$root/tests/bench/flash-lib.bash"
command -v fio >/dev/null || { log "fio is not installed (apt-get install fio)"; exit 1; }
mkdir -p "$scratch" "$out"

img=$scratch/l7b-kv$KV_HEADS.sfimg
if ! [ -f "$img" ]; then
	log "making the model in $scratch (13.5 GB, then the image)"
	"$fixtures/mkmodel" -o "$scratch/model" --hidden 4096 --intermediate 11008 --layers 32 \
		--heads 32 --kv-heads "$KV_HEADS" --vocab 32000 --no-tie --max-pos 4096 \
		--tokenizer "$root/models/mix4-1m" >/dev/null
	sf-pack --model "$scratch/model" -q -o "$img"
	rm -rf "$scratch/model"
fi
[ -n "${KEEP:-}" ] || trap 'rm -f "$img"' EXIT
flash_cgroup sf-7b
[ -z "$cg" ] || trap 'rmdir "$cg" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -f "$img"' EXIT
model_bytes=$(sf-pack --info "$img" | jq '.sizes.resident + .sizes.top')
prompt=$(prompt_of "$PROMPT_TOKENS" "$scratch")
log "model $model_bytes bytes; --ram at $RAMS %"

configs=("budget1|--budget 1" "density0.5|--density 0.5")
: > "$out/runs.jsonl"
for rep in $(seq "$REPEATS"); do
	jq -nc --argjson r "$rep" --argjson seq "$(device_gbs read 256k 32)" \
		--argjson rand "$(device_gbs randread 256k 32)" \
		'{device: $r, seq_256k_qd32_gbs: $seq, rand_256k_qd32_gbs: $rand}' >> "$out/runs.jsonl"
	for c in "${configs[@]}"; do
		name=${c%%|*}
		read -r -a opts <<< "${c#*|}"
		for pct in $RAMS; do
			ram=$((model_bytes * pct / 100))
			drop
			if s=$(capped "$ram" sf-run "$img" "${opts[@]}" -p "$(cat "$prompt")" -n "$N" \
				-c 512 --temp 0 --ignore-eos -t "$THREADS" --bench --ram "$ram" 2>"$out/err.txt"); then
				jq -c --arg c "$name" --argjson p "$pct" --argjson ram "$ram" --argjson r "$rep" \
					'{config: $c, ram_pct: $p, ram: $ram, repeat: $r, tg, pp, prompt_tokens,
					  ttft_s: (.prompt_tokens / .pp), p50_s: .latency_seconds.p50,
					  mb_per_token: (.bytes_moved_per_token / 1e6), requests_per_token,
					  kib_per_request: (.reads.bytes_per_request / 1024),
					  peak_rss_mb: (.memory.peak_rss / 1e6), ram_mb: ($ram / 1e6)}' <<< "$s" \
					>> "$out/runs.jsonl"
			else
				jq -nc --arg c "$name" --argjson p "$pct" --arg e "$(head -1 "$out/err.txt")" \
					'{config: $c, ram_pct: $p, refused: $e}' >> "$out/runs.jsonl"
			fi
			log "repeat $rep: $name at $pct%: $(tail -1 "$out/runs.jsonl")"
		done
	done
done
jq -s '
	def median: sort | .[(length - 1) / 2 | floor];
	{device: {seq_256k_qd32_gbs: (map(select(.device)) | map(.seq_256k_qd32_gbs) | median),
		  rand_256k_qd32_gbs: (map(select(.device)) | map(.rand_256k_qd32_gbs) | median)},
	 runs: (map(select(.config and (.refused | not))) | group_by([.config, .ram_pct]) |
		map({config: .[0].config, ram_pct: .[0].ram_pct, ram_mb: .[0].ram_mb,
		     tok_s: (map(.tg) | median), ttft_s: (map(.ttft_s) | median),
		     prompt_tokens: .[0].prompt_tokens, mb_per_token: (map(.mb_per_token) | median),
		     requests_per_token: (map(.requests_per_token) | median),
		     kib_per_request: (map(.kib_per_request) | median),
		     peak_rss_mb: (map(.peak_rss_mb) | max)})),
	 refused: map(select(.refused))}' "$out/runs.jsonl" > "$out/summary.json"
jq . "$out/summary.json"
