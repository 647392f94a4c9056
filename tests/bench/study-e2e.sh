#!/usr/bin/env bash
# Study 3, end to end (Neuralink Figure 9, SpAx Figure 6), and the issue 7
# measurements: latency per token from flash (O_DIRECT) for dense offload
# (budget 1, no cache), LLMFlash-like (natural order, LRU cache), Neuralink-S
# (frequency order, collapse auto, S3-FIFO), Neuralink (coact order,
# collapse auto, S3-FIFO with linking-aligned admission), TEAL (one tier,
# no cache), SpAx (calibrated tiers, no cache) and everything combined, the
# sparse ones at +10% perplexity (study 1's grid points); the dense in-RAM
# decoder as the compute floor. Beside each flash row: a raw io_uring read
# (tests/bench/uring.c) at the same mean request size and queue depth, the
# I/O efficiency against it, and the CPU time per token outside compute and
# I/O wait. Writes e2e.jsonl, e2e.csv, e2e.png. docs/RESULTS.md.
#   tests/bench/study-e2e.sh   [QUICK=1] [N] [REPEATS] [CACHE_RATIO=0.1] [SEG_ADMIT]
. "$(dirname "$0")/study-lib.bash"

artifacts
probe_device
method=$(image_method)
d10=$(at_pct teal 10)
b10=$(at_pct "spax-$method" 10)
cr=${CACHE_RATIO:-0.1}
seg=${SEG_ADMIT:-$(jq -r '.best_seg_admit // empty' "$out/../cache/summary.json" 2>/dev/null || true)}
seg=${seg:-0.5}
log "TEAL density $d10, $method budget $b10 at +10%; cache ratio $cr, seg-admit $seg"
L=$(n_layers)
free=()
sf-run --help | grep -q -- '--free-riders' && free=(--free-riders)

: > "$out/e2e.jsonl"
row() { bench "$@" >> "$out/e2e.jsonl"; }
bench_ram >> "$out/e2e.jsonl"
row dense-offload --budget 1 --collapse 0 --cache-policy none "$art/identity-$method.sfimg"
row llmflash --density "$d10" --collapse 0 --cache-policy lru --cache-ratio "$cr" "$art/identity-$method.sfimg"
row neuralink-s --density "$d10" --cache-policy s3fifo --cache-ratio "$cr" "$art/frequency-$method.sfimg"
row neuralink --density "$d10" --cache-policy s3fifo --seg-admit "$seg" --cache-ratio "$cr" \
	"$art/coact-$method.sfimg"
row teal --density "$d10" --collapse 0 --cache-policy none "$art/identity-$method.sfimg"
row spax --budget "$b10" --collapse 0 --cache-policy none "$art/identity-$method.sfimg"
row combined --budget "$b10" --cache-policy s3fifo --seg-admit "$seg" --cache-ratio "$cr" \
	"${free[@]}" "$art/coact-$method.sfimg"

# the raw io_uring reference: per flash row, random reads of its mean request
# size (4 KiB multiple) at its queue depth (a group's requests go in at once,
# at most --qd 64) over a 1 GiB file beside the artifacts; one uring run over
# every size and depth (it ends with a 12 s device probe, so not under QUICK)
: > "$out/uring.jsonl"
if [ -z "$QUICK" ]; then
	jq -r --argjson L "$L" 'select(.requests_per_token > 0) |
		"\(.name) \((.bytes_per_request / 4096 | ceil) * 4096) \([(.requests_per_token / (4 * $L) | ceil), 64] | min)"' \
		"$out/e2e.jsonl" > "$out/uring-want.txt"
	blocks=$(awk '{ print $2 }' "$out/uring-want.txt" | sort -un | head -n 16 | paste -sd,)
	qds=$(awk '{ print $3 }' "$out/uring-want.txt" | sort -un | head -n 16 | paste -sd,)
	"$benchbin/uring" "$art/uring-ref.bin" 1G "${URING_SECONDS:-0.5}" "$blocks" "$qds" 2>/dev/null |
		jq -c 'select(.test == "random")' > "$out/uring-all.jsonl"
	while read -r name blk qd; do
		jq -c --arg n "$name" --argjson b "$blk" --argjson q "$qd" \
			'select(.block == $b and .qd == $q) | {name: $n, block, qd, gb_per_s, iops}' \
			"$out/uring-all.jsonl" >> "$out/uring.jsonl"
	done < "$out/uring-want.txt"
fi

jq -s --slurpfile u "$out/uring.jsonl" '
	(map(select(.name == "dense-offload"))[0].p50_ms) as $off |
	map(. as $r | ($u | map(select(.name == $r.name))[0]) as $raw |
	    $r + {speedup_vs_offload: ($off / .p50_ms),
		  raw_uring_mb_s: (if $raw then $raw.gb_per_s * 1000 else null end),
		  raw_block: $raw.block, raw_qd: $raw.qd,
		  io_efficiency: (if $raw and $raw.gb_per_s > 0 then .raw_mb_s / ($raw.gb_per_s * 1000) else null end),
		  overhead_ms: (if .sparse_ms then .sparse_ms - .compute_ms - .io_wait_ms else null end),
		  outside_sparse_ms: (if .sparse_ms then .mean_ms - .sparse_ms else null end)})' \
	"$out/e2e.jsonl" > "$out/e2e.json"
{
	echo "config,p50_ms,speedup_vs_offload,MB_moved_per_token,moved_over_needed,req_per_token,io_MB_s,raw_uring_MB_s,io_efficiency,cpu_overhead_ms,hit_rate"
	jq -r '.[] | def r(n): if . == null then "" else . * n | round / n end;
		[.name, (.p50_ms | r(1000)), (.speedup_vs_offload | r(100)), (.bytes_moved_per_token / 1e6 | r(1000)),
		 (.moved_over_needed | r(100)), (.requests_per_token | r(1)), (.raw_mb_s | r(1)),
		 (.raw_uring_mb_s | r(1)), (.io_efficiency | r(100)), (.overhead_ms | r(1000)), (.hit_rate | r(1000))] |
		map(tostring) | join(",")' "$out/e2e.json"
} > "$out/e2e.csv"
jq -r '.[] | "\(.name) \(.p50_ms) \(.bytes_moved_per_token / 1e6) \(.bytes_needed_per_token / 1e6)"' \
	"$out/e2e.json" > "$out/e2e.dat"
plot e2e

echo "at +10% perplexity: TEAL density $d10, SpAx ($method) budget $b10; cache ratio $cr; medians of $REPEATS runs of $N tokens"
table "$out/e2e.csv"
