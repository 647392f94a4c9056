#!/usr/bin/env bash
# The flash decoder against its device (issue 16). A random model of
# TinyLlama-1.1B shape (hidden 2048, intermediate 5632, 22 layers, 32/4
# heads, vocab 32000, untied, BF16, 2.2 GB; tests/fixtures/mkmodel, scalar
# codes) is packed in a scratch directory; then in one run, interleaved,
# medians of REPEATS:
#   - the device: fio O_DIRECT random 256 KiB reads at depth 32 (its best
#     large reads), O_DIRECT sequential reads of the image at 256 KiB depth
#     32 and 4 MiB depth 1, and a buffered sequential read of the image
#     (fio invalidates the file's page cache before each);
#   - sf-run IMAGE (-c 512, -t 1) at budget 1, density 0.5, density 0.3 and scalar codes
#     at k-top 0.2 / k-mid 0.3, each with --ram at 30% and 15% of the
#     model's bytes, as built now (with the head in RAM, and with
#     --head-on-flash) and as the decoder was before issue 16 (--prefetch 0
#     --read-size 1G: one request per run, no read ahead);
#     the image's page cache dropped before each run (posix_fadvise through
#     dd iflag=nocache), and where the cgroup v1 memory controller is
#     writable, inside a child memory cgroup of the --ram size, so that any
#     page cache the run uses is charged to it;
#   - the replay: every configuration's requests (sf-run --read-log) issued
#     per pass by a plain liburing loop at depth 64 with O_DIRECT
#     (tests/bench/replay.c) as fast as the device serves them: what
#     pipelining across groups can reach for that request list (median
#     pass against sf-run's median token). The device slows under
#     sustained load (a virtual disk's burst), so the replay alternates:
#     after the run in odd repeats, before it (on the previous run's
#     requests) in even ones.
# Random weights have no co-activation: selections are scattered, reads
# small and IOPS-bound; requests per token and bytes per request are shown
# beside every figure. llama.cpp is not in Debian 12: its figures (issue
# 16's table) are not remeasured here.
# Then study 3's dense offload and TEAL rows on mix4-5m (../shared), now
# and as before, medians of REPEATS runs of 48 tokens at -t 2.
#   tests/bench/flash-pipeline.sh  [SCRATCH=/var/tmp/sf-flash] [N=8] [REPEATS=3]
#                                  [KEEP=1: keep the image] [QUICK=1: a small model]
#                                  [PARTS="tl mix5": which parts run]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
fixtures=${SF_FIXTURES:-$root/build/opt/fixtures}
benchbin=${SF_BENCH:-$root/build/opt/bench}
scratch=${SCRATCH:-/var/tmp/sf-flash}
out=${SF_BENCH_OUT:-$root/build/bench/flash-pipeline}
N=${N:-8}
REPEATS=${REPEATS:-3}
PROMPT="In the beginning God created"
export PATH=$bin:$PATH
mkdir -p "$scratch" "$out"
log() { echo "flash-pipeline: $*" >&2; }
. "$root/tests/bench/flash-lib.bash"
command -v fio >/dev/null || { log "fio is not installed (apt-get install fio)"; exit 1; }

PARTS=${PARTS:-tl mix5}
configs=("budget1|--budget 1" "density0.5|--density 0.5" "density0.3|--density 0.3"
	 "scalar0.2+0.3|--k-top 0.2 --k-mid 0.3")
variants=("new|" "new-head|--head-on-flash" "old|--prefetch 0 --read-size 1073741824")
tinyllama() {
shape=(--hidden 2048 --intermediate 5632 --layers 22 --heads 32 --kv-heads 4 --vocab 32000)
img=$scratch/tl.sfimg
if [ -n "${QUICK:-}" ]; then
	shape=(--hidden 512 --intermediate 1376 --layers 4 --heads 8 --kv-heads 2 --vocab 4096)
	img=$scratch/quick.sfimg
fi
if ! [ -f "$img" ]; then
	log "making the model in $scratch: ${shape[*]}"
	"$fixtures/mkmodel" -o "$scratch/model" "${shape[@]}" --max-pos 2048 --no-tie \
		--tokenizer "$root/models/mix4-1m" >/dev/null
	sf-encode --model "$scratch/model" --method scalar -t 2 -q -o "$scratch/codes.sfq"
	sf-pack --model "$scratch/model" --codes "$scratch/codes.sfq" -q -o "$img"
	rm -rf "$scratch/model" "$scratch/codes.sfq"
fi
[ -n "${KEEP:-}" ] || trap 'rm -f "$img"' EXIT
model_bytes=$(sf-pack --info "$img" | jq '.sizes.resident + .sizes.top')
PCTS=${PCTS:-30 15}
[ -z "${QUICK:-}" ] || PCTS="100 70"
rams=()
for p in $PCTS; do rams+=($((model_bytes * p / 100))); done
log "model $model_bytes bytes; --ram ${rams[*]} ($PCTS %)"

# a child of our own memory cgroup, when the v1 controller is writable
flash_cgroup sf-flash
[ -z "$cg" ] || trap 'rmdir "$cg" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -f "$img"' EXIT

fio_mbs() {	# fio options...: MB/s read
	fio --name=f --filename="$img" --readonly --output-format=json --runtime=4 --time_based=0 \
		--size="$model_bytes" "$@" | jq '.jobs[0].read.bw_bytes / 1e6 | round'
}

replay() {	# LOG CONFIG VARIANT PCT REPEAT: the requests at depth 64, as fast as served
	"$benchbin/replay" "$img" "$1" 64 |
		jq -c --arg c "$2" --arg v "$3" --argjson p "$4" --argjson r "$5" \
			'{replay: $c, variant: $v, ram_pct: $p, repeat: $r, passes, p50, seconds,
			  mb: (.bytes / 1e6)}' >> "$out/runs.jsonl"
}
: > "$out/runs.jsonl"
: > "$out/device.jsonl"
for rep in $(seq "$REPEATS"); do
	log "repeat $rep: the device"
	jq -n --argjson r "$rep" \
		--argjson rand "$(fio_mbs --rw=randread --bs=256k --iodepth=32 --ioengine=io_uring --direct=1)" \
		--argjson seq "$(fio_mbs --rw=read --bs=256k --iodepth=32 --ioengine=io_uring --direct=1)" \
		--argjson seq4m "$(fio_mbs --rw=read --bs=4m --iodepth=1 --ioengine=io_uring --direct=1)" \
		--argjson buffered "$(fio_mbs --rw=read --bs=1m --iodepth=1 --ioengine=psync --direct=0 --invalidate=1)" \
		'{repeat: $r, random_256k_qd32: $rand, seq_256k_qd32: $seq, seq_4m_qd1: $seq4m, buffered_seq: $buffered}' \
		>> "$out/device.jsonl"
	for c in "${configs[@]}"; do
		name=${c%%|*}
		for v in "${variants[@]}"; do
			vname=${v%%|*}
			for ram in "${rams[@]}"; do
				pct=$(((ram * 100 + model_bytes - 1) / model_bytes))
				rlog=$out/reads-$name-$vname-$pct.txt
				# the replay alternates before and after the run (the device
				# slows under sustained load): odd repeats after, on this
				# run's requests; even ones before, on the last run's
				if [ $((rep % 2)) = 0 ] && [ -f "$rlog" ]; then
					replay "$rlog" "$name" "$vname" "$pct" "$rep"
				fi
				drop
				# shellcheck disable=SC2086
				if s=$(capped "$ram" sf-run -p "$PROMPT" -n "$N" -c 512 --temp 0 -t 1 --bench \
					--ram "$ram" --read-log "$rlog.new" ${c#*|} ${v#*|} "$img" 2>"$out/err.txt"); then
					mv "$rlog.new" "$rlog"
					jq -c --arg c "$name" --arg v "$vname" --argjson p "$pct" --argjson r "$rep" \
						'{config: $c, variant: $v, ram_pct: $p, repeat: $r, tg, p50: .latency_seconds.p50,
						  mb_per_token: (.bytes_moved_per_token / 1e6), requests_per_token,
						  kib_per_request: (.reads.bytes_per_request / 1024), raw_bandwidth,
						  compute_s: .compute_seconds, overlap_s: .overlap_seconds,
						  io_busy_s: .io_span_seconds, tokens, peak_rss: .memory.peak_rss}' <<< "$s" \
						>> "$out/runs.jsonl"
				else
					jq -nc --arg c "$name" --arg v "$vname" --argjson p "$pct" --argjson r "$rep" \
						--arg e "$(head -1 "$out/err.txt")" \
						'{config: $c, variant: $v, ram_pct: $p, repeat: $r, refused: $e}' >> "$out/runs.jsonl"
					rm -f "$rlog.new"
					continue
				fi
				[ $((rep % 2)) = 0 ] || replay "$rlog" "$name" "$vname" "$pct" "$rep"
			done
		done
	done
done

rm -f "$out"/reads-*.txt
jq -s '
	def median: sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
	(map(select(.config and (.refused | not))) | group_by([.config, .variant, .ram_pct]) |
	 map({config: .[0].config, variant: .[0].variant, ram_pct: .[0].ram_pct,
	      tg: (map(.tg) | median), p50: (map(.p50) | median),
	      mb_per_token: (map(.mb_per_token) | median), requests_per_token: (map(.requests_per_token) | median),
	      kib_per_request: (map(.kib_per_request) | median), raw_mb_s: (map(.raw_bandwidth / 1e6) | median),
	      compute_per_token: (map(.compute_s / .tokens) | median),
	      overlap_per_token: (map(.overlap_s / .tokens) | median),
	      io_busy_per_token: (map(.io_busy_s / .tokens) | median),
	      peak_rss_mb: (map(.peak_rss / 1e6) | max)})) as $runs |
	(map(select(.replay)) | group_by([.replay, .variant, .ram_pct]) |
	 map({key: "\(.[0].replay)/\(.[0].variant)/\(.[0].ram_pct)", value: (map(.p50) | median)}) |
	 from_entries) as $replay |
	{runs: [$runs[] | . + {replay_per_token: $replay["\(.config)/\(.variant)/\(.ram_pct)"]} |
		. + {latency_over_replay: (if .replay_per_token then .p50 / .replay_per_token else null end)}],
	 refused: [.[] | select(.refused)] | unique_by([.config, .variant, .ram_pct])}' \
	"$out/runs.jsonl" > "$out/summary.json"
jq -s '
	def median: sort | .[(length - 1) / 2 | floor];
	{random_256k_qd32: (map(.random_256k_qd32) | median), seq_256k_qd32: (map(.seq_256k_qd32) | median),
	 seq_4m_qd1: (map(.seq_4m_qd1) | median), buffered_seq: (map(.buffered_seq) | median)}' \
	"$out/device.jsonl" > "$out/device.json"

echo "device (MB/s, medians of $REPEATS): $(jq -c . "$out/device.json")"
echo "TinyLlama shape, random weights, -t 1, $N tokens, medians of $REPEATS; replay: the run's requests at depth 64, median pass"
{
	echo "config,variant,ram%,tok/s,p50 s,replay s/token,p50/replay,MB/token,raw MB/s,req/token,KiB/req,compute s/token,overlap s/token,peak RSS MB"
	jq -r '.runs[] | [.config, .variant, .ram_pct, (.tg * 100 | round / 100), (.p50 * 1000 | round / 1000),
		(if .replay_per_token then (.replay_per_token * 1000 | round / 1000) else "-" end),
		(if .latency_over_replay then (.latency_over_replay * 100 | round / 100) else "-" end),
		(.mb_per_token | round), (.raw_mb_s | round), (.requests_per_token | round),
		(.kib_per_request | round), (.compute_per_token * 1000 | round / 1000),
		(.overlap_per_token * 1000 | round / 1000), (.peak_rss_mb | round)] | map(tostring) | join(",")' \
		"$out/summary.json"
} | column -s, -t
jq -r '.refused[] | "refused: \(.config) \(.variant) at \(.ram_pct)%: \(.refused)"' "$out/summary.json"

}
[[ " $PARTS " != *" tl "* ]] || tinyllama
# study 3's dense offload and TEAL rows on mix4-5m, now and as before
m5=${SF_SHARED:-$root/../shared}/models/mix4-5m
if ! [ -d "$m5" ]; then
	log "no $m5: the mix4-5m rows are skipped"
	exit 0
fi
sf-pack -q --model "$m5" -o "$scratch/mix5.sfimg"
: > "$out/mix5.jsonl"
for rep in $(seq "$REPEATS"); do
	for c in "offload|--budget 1 --collapse 0 --cache-policy none" "teal0.6|--density 0.6 --cache-policy none"; do
		for v in "${variants[@]}"; do
			dd if="$scratch/mix5.sfimg" iflag=nocache count=0 status=none
			# shellcheck disable=SC2086
			sf-run -p "$PROMPT" -n 48 --temp 0 -t 2 --bench ${c#*|} ${v#*|} "$scratch/mix5.sfimg" |
				jq -c --arg c "${c%%|*}" --arg v "${v%%|*}" \
					'{config: $c, variant: $v, p50_ms: (.latency_seconds.p50 * 1000),
					  mb: (.bytes_moved_per_token / 1e6), req: .requests_per_token}' >> "$out/mix5.jsonl"
		done
	done
done
[ -n "${KEEP:-}" ] || rm -f "$scratch/mix5.sfimg"
echo "mix4-5m, -t 2, 48 tokens, medians of $REPEATS"
jq -rs 'def median: sort | .[(length - 1) / 2 | floor];
	group_by([.config, .variant]) | .[] |
	"\(.[0].config) \(.[0].variant): p50 \(map(.p50_ms) | median | . * 100 | round / 100) ms, \(map(.mb) | median | . * 100 | round / 100) MB/token, \(map(.req) | median | round) requests/token"' \
	"$out/mix5.jsonl"
