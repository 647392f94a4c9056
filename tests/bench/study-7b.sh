#!/usr/bin/env bash
# Study 6 at the Llama-2-7B shape (issue 20): a random model of the full
# shape (hidden 4096, intermediate 11008, 32 layers, 32 heads over
# KV_HEADS KV heads (default 32; 8 for the GQA variant), vocab 32,000,
# untied, BF16, 13.5 GB; tests/fixtures/mkmodel) in a scratch directory.
# Random weights: time, memory and I/O only, not quality.
#
# PARTS="pipeline trellis decode" (the default) or any of them:
# - pipeline: make artifacts on it, one stage after another so that each
#   has a wall time and a peak RSS (GNU time's maximum over the stage's
#   jobs) of its own, -j JOBS (default 2) jobs of -t 1 (the one placement
#   job -t JOBS): traces of PROFILE_TOKENS tokens (default 512) of each
#   genre's profile split, co-activation, coact placement, codes of
#   METHODS (default scalar;
#   trellis takes hours here), calibration at BUDGETS (default five) on
#   CALIB_TOKENS (default 32: on mix4-5m as good as 256, docs/RESULTS.md),
#   the image. Per stage in stages.jsonl, in all in pipeline.json.
# - trellis: trellis codes, hours here for all 32 layers, are timed on a
#   whole layer (TRELLIS_LAYER, default 0) at -t JOBS, from which one
#   machine's 32 layers and N machines' follow; and as Slurm job
#   throughput: SLURM_JOBS (default 4) jobs of one attn_out each on a
#   one-node cluster of 4 CPU slots (tests/fixtures/slurm-cluster, which
#   needs Debian's slurmctld, slurmd, slurm-client and munge, and root;
#   skipped with the reason otherwise) against the same jobs run here one
#   after another. In trellis.json.
# - decode: sf-run IMAGE (the pipeline's coact image, this run's or a kept
#   one, else an image packed without codes) with --ram at RAMS percent of the model's
#   bytes (default "25 15"), inside a child memory cgroup of that size
#   where the v1 controller is writable (the page cache charged to it),
#   at budget 1 and TEAL density 0.5: a prompt of PROMPT_TOKENS tokens
#   (default 64) in one pass of -b, then N tokens (default 8), -t THREADS
#   (default 2). Per run: decode tok/s, time to first token, bytes and
#   requests per token, peak RSS against --ram; beside fio's O_DIRECT
#   256 KiB reads of the image at depth 32.
#   tests/bench/study-7b.sh [SCRATCH=/var/tmp/sf-7b] [REPEATS=1] [KEEP=1]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
fixtures=${SF_FIXTURES:-$root/build/opt/fixtures}
scratch=${SCRATCH:-/var/tmp/sf-7b}
out=${SF_BENCH_OUT:-$root/build/bench/study-7b}
PARTS=${PARTS:-pipeline trellis decode}
TRELLIS_LAYER=${TRELLIS_LAYER:-0}
SLURM_JOBS=${SLURM_JOBS:-4}
REPEATS=${REPEATS:-1}
N=${N:-8}
THREADS=${THREADS:-2}
JOBS=${JOBS:-2}
KV_HEADS=${KV_HEADS:-32}
PROMPT_TOKENS=${PROMPT_TOKENS:-64}
PROFILE_TOKENS=${PROFILE_TOKENS:-512}
METHODS=${METHODS:-scalar}
BUDGETS=${BUDGETS:-0.1,0.2,0.3,0.5,0.7}
CALIB_TOKENS=${CALIB_TOKENS:-32}
RAMS=${RAMS:-25 15}
data=${SF_DATA:-$root/../shared/data/mix4}
export PATH=$bin:$PATH
log() { echo "study-7b: $*" >&2; }
. "$root/tests/bench/flash-lib.bash"
command -v fio >/dev/null || { log "fio is not installed (apt-get install fio)"; exit 1; }
[ -x /usr/bin/time ] || { log "GNU time is not installed (apt-get install time)"; exit 1; }
mkdir -p "$scratch" "$out"
model=$scratch/model-kv$KV_HEADS
art=$scratch/art-kv$KV_HEADS
img=$scratch/l7b-kv$KV_HEADS.sfimg
part() { [[ " $PARTS " == *" $1 "* ]]; }
[ -n "${KEEP:-}" ] || trap 'rm -rf "$model" "$art" "$img"' EXIT

if ! [ -f "$model/model.safetensors" ] && { part pipeline || part trellis || ! [ -f "$img" ]; }; then
	log "making the model in $model (13.5 GB with 32 KV heads, 11.9 GB with 8)"
	"$fixtures/mkmodel" -o "$model" --hidden 4096 --intermediate 11008 --layers 32 \
		--heads 32 --kv-heads "$KV_HEADS" --vocab 32000 --no-tie --max-pos 4096 \
		--tokenizer "$root/models/mix4-1m" >/dev/null
fi

# One stage of make artifacts: its wall time and the largest peak RSS of
# its jobs (GNU time reports the maximum over the children make waited for).
stage() {	# NAME TARGET...
	local name=$1 t
	shift
	log "stage $name"
	/usr/bin/time -f '%e %M' -o "$out/time.txt" make -s -C "$root" -f mk/artifacts.mk \
		SF_BIN="$bin" MODEL="$model" CORPUS="$data/*.profile.txt" \
		CALIB_CORPUS="$data/*.calib.txt" OUT="$art" METHODS="$METHODS" PLACEMENTS=coact \
		PROFILE_TOKENS="$PROFILE_TOKENS" BUDGETS="$BUDGETS" CALIB_TOKENS="$CALIB_TOKENS" \
		THREADS="${STAGE_THREADS:-1}" -j"$JOBS" "$@"
	read -r -a t < "$out/time.txt"
	jq -nc --arg s "$name" --argjson w "${t[0]}" --argjson k "${t[1]}" --argjson j "$JOBS" \
		'{stage: $s, wall_s: $w, peak_rss_mb: ($k * 1024 / 1e6), jobs: $j}' | tee -a "$out/stages.jsonl" >&2
}

if part pipeline; then
	[ -d "$data" ] || { log "$data: no corpus (../shared absent?)"; exit 1; }
	: > "$out/stages.jsonl"
	traces=()
	for f in "$data"/*.profile.txt; do
		traces+=("$art/trace/$(basename "$f" .txt).sft")
	done
	stage traces "${traces[@]}"
	stage coact "$art/coact.sfc"
	STAGE_THREADS=$JOBS stage place "$art/place-coact.json"	# one job
	for m in $METHODS; do
		stage "codes-$m" "$art/codes-$m.sfq"
		stage "calibrate-$m" "$art/calib-$m.json"
		stage "pack-$m" "$art/coact-$m.sfimg"
	done
	jq -s '{stages: ., total_s: (map(.wall_s) | add), peak_rss_mb: (map(.peak_rss_mb) | max)}' \
		"$out/stages.jsonl" > "$out/pipeline.json"
	jq . "$out/pipeline.json"
	img=$art/coact-${METHODS%% *}.sfimg
elif [ -f "$art/coact-${METHODS%% *}.sfimg" ]; then	# an earlier run's, kept
	img=$art/coact-${METHODS%% *}.sfimg
elif ! [ -f "$img" ]; then
	log "packing $img without codes"
	sf-pack --model "$model" -q -o "$img"
fi

# "WALL RSS_KB" of CMD
timed() { /usr/bin/time -f '%e %M' -o "$out/time.txt" "$@" >/dev/null && cat "$out/time.txt"; }

if part trellis; then
	log "trellis codes of layer $TRELLIS_LAYER, -t $JOBS"
	read -r wall rss < <(timed sf-encode -q --model "$model" --method trellis \
		--layers "$TRELLIS_LAYER" -t "$JOBS" -o "$scratch/trellis-L$TRELLIS_LAYER.sfq")
	rm -f "$scratch/trellis-L$TRELLIS_LAYER.sfq"
	slurm='{"skipped": "not run"}'
	cluster=$root/tests/fixtures/slurm-cluster
	if why=$("$cluster" check 2>&1); then
		# the jobs one after another here, then as Slurm jobs on 4 slots
		jobs_here=0
		for l in $(seq 0 $((SLURM_JOBS - 1))); do
			read -r w _ < <(timed sf-encode -q --model "$model" --method trellis --layers "$l" \
				--groups attn_out -t 1 -o "$scratch/attn-L$l.sfq")
			jobs_here=$(awk -v a="$jobs_here" -v b="$w" 'BEGIN { print a + b }')
		done
		"$cluster" start "$scratch/cluster" 4 >/dev/null
		export SLURM_CONF=$scratch/cluster/slurm.conf
		t0=$(date +%s.%N)
		for l in $(seq 0 $((SLURM_JOBS - 1))); do
			srun --quiet --ntasks=1 --cpus-per-task=1 --job-name="sf-attn-L$l" \
				sf-encode -q --model "$model" --method trellis --layers "$l" --groups attn_out \
				-t 1 -o "$scratch/attn-slurm-L$l.sfq" &
		done
		wait
		t1=$(date +%s.%N)
		"$cluster" stop "$scratch/cluster"
		unset SLURM_CONF
		same=true
		for l in $(seq 0 $((SLURM_JOBS - 1))); do
			cmp -s "$scratch/attn-L$l.sfq" "$scratch/attn-slurm-L$l.sfq" || same=false
			rm -f "$scratch/attn-L$l.sfq" "$scratch/attn-slurm-L$l.sfq"
		done
		slurm=$(jq -n --argjson n "$SLURM_JOBS" --argjson here "$jobs_here" \
			--argjson span "$(awk -v a="$t1" -v b="$t0" 'BEGIN { print a - b }')" --argjson same "$same" \
			'{jobs: $n, slots: 4, one_after_another_s: $here, slurm_span_s: $span,
			  throughput_ratio: ($here / $span), same_bytes: $same}')
	else
		slurm=$(jq -n --arg why "$why" '{skipped: $why}')
	fi
	jq --argjson l "$TRELLIS_LAYER" --argjson t "$JOBS" --argjson w "$wall" \
		--argjson k "$rss" --argjson slurm "$slurm" \
		'.hidden_size as $d | (.hidden_size * .num_key_value_heads / .num_attention_heads) as $kv
		 | .num_hidden_layers as $n
		 | {layer: $l, threads: $t, layer_s: $w, peak_rss_mb: ($k * 1024 / 1e6),
		  weights_per_s: ((2 * $d * $d + 2 * $d * $kv + 3 * $d * .intermediate_size) / $w),
		  one_machine_h: ($w * $n / 3600),
		  machines: [1, 2, 4, 8 | {machines: ., hours: ($w * ($n / . | ceil) / 3600)}],
		  slurm: $slurm}' "$model/config.json" | tee "$out/trellis.json"
fi
part decode || exit 0

flash_cgroup sf-7b
[ -z "$cg" ] || trap 'rmdir "$cg" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$model" "$art" "$img"' EXIT
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
