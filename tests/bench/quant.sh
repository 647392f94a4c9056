#!/usr/bin/env bash
# The quantized top tier (issue 22): images whose top tier is q8 or q4
# (sf-pack --dtype) against BF16, two parts:
#   quality  mix4-5m, every genre's test split, perplexity through
#            --simulate (equal to the flash path, tests/cli/sf-run-image.bats,
#            so exact and not noisy): BF16 dense (--model); BF16, q8 and q4
#            images at budget 1; q4 with TEAL (TEAL_GRID); SpAx tiers
#            calibrated against each top tier (sf-encode --calibrate --dtype)
#            at BUDGETS, for BF16 and q4; then the budget each needs at +10%
#            over BF16 dense and over q4 dense (linear between the realised
#            budgets around it). quality.csv, summary.json.
#   speed    the TinyLlama-shape random model of flash-pipeline.sh
#            (tests/fixtures/mkmodel, scalar codes) packed as BF16, q8 and
#            q4; sf-run at budget 1 and at --k-top 0.2 --k-mid 0.3 (budgets
#            in each image's own bytes), --ram 30% of the BF16 image's bytes
#            (inside a memory cgroup of that size where one is writable, the
#            image's page cache dropped before each run), the dtypes
#            interleaved, medians of REPEATS: tok/s and MB per token, with
#            fio's sequential and random 256 KiB reads of the image in each
#            repeat (device.jsonl). The
#            issue's target: q4 at budget 1 at least 3x BF16 at budget 1.
#            speed.csv, speed.json.
#   tests/bench/quant.sh  [QUANT_PARTS="quality speed"] [QUICK=1: mix4-1m and a
#                         small random model] [PPL_TOKENS=4096]
#                         [BUDGETS=0.1,...,0.9] [METHOD=trellis] [N=16]
#                         [REPEATS=3] [SCRATCH=/var/tmp/sf-quant] [KEEP=1]
ppl_tokens=${PPL_TOKENS:-4096}
. "$(dirname "$0")/study-lib.bash"
. "$root/tests/bench/flash-lib.bash"

QUANT_PARTS=${QUANT_PARTS:-quality speed}
DTYPES="bf16 q8 q4"
if [ -n "$QUICK" ]; then
	METHOD=${METHOD:-scalar}
	BUDGETS=${BUDGETS:-0.3,0.6}
	TEAL_GRID=${TEAL_GRID:-0.5 1}
	CALIB=(--calib-tokens 8 --window 8)
else
	METHOD=${METHOD:-trellis}
	BUDGETS=${BUDGETS:-0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9}
	TEAL_GRID=${TEAL_GRID:-0.3 0.4 0.5 0.6 0.7 0.8 0.9}
	PPL_TOKENS=$ppl_tokens
	CALIB=(--calib-tokens 256 --window 128)
fi
scratch=${SCRATCH:-/var/tmp/sf-quant}
mkdir -p "$scratch"

# --- quality

quality() {
	local a=$out/art c=() g dt b
	mkdir -p "$a"
	for g in $GENRES; do c+=(--corpus "$data/$g.calib.txt"); done
	[ -f "$a/codes.sfq" ] || sf-encode -q --model "$model" --method "$METHOD" -t "$JOBS" -o "$a/codes.sfq"
	[ -f "$a/q8.sfimg" ] || sf-pack -q --model "$model" --dtype q8 -o "$a/q8.sfimg"
	for dt in bf16 q4; do
		[ -f "$a/$dt.sfimg" ] && continue
		log "calibrating against the $dt top tier at $BUDGETS"
		# bf16: the model's own (keep)
		sf-encode -q --model "$model" --calibrate --codes "$a/codes.sfq" -t "$JOBS" "${c[@]}" \
			--budgets "$BUDGETS" "${CALIB[@]}" --dtype "${dt/bf16/keep}" -o "$a/calib-$dt.json"
		sf-pack -q --model "$model" --codes "$a/codes.sfq" --calib "$a/calib-$dt.json" \
			--dtype "$dt" -o "$a/$dt.sfimg"
	done
	point() {	# genre config budget realised sf-run-args...
		local g=$1 m=$2 b=$3 r=$4
		shift 4
		echo "$g,$m,$b,$r,$(ppl "$data/$g.test.txt" "$@")" > "$out/pts/$g-$m-$b"
	}
	rm -rf "$out/pts"
	mkdir -p "$out/pts"
	for g in $GENRES; do
		pool_run point "$g" dense 1 1 --model "$model"
		for dt in $DTYPES; do
			pool_run point "$g" "$dt" 1 1 --simulate "$a/$dt.sfimg"
		done
		for d in $TEAL_GRID; do
			pool_run point "$g" q4-teal "$d" "$d" --density "$d" --simulate "$a/q4.sfimg"
		done
		for dt in bf16 q4; do
			for b in $(budgets_of "$a/$dt.sfimg"); do
				pool_run point "$g" "$dt-spax" "$b" "$(realised_of "$a/$dt.sfimg" "$b")" \
					--budget "$b" --simulate "$a/$dt.sfimg"
			done
		done
	done
	pool_wait
	{
		echo "genre,config,budget,realised,ppl,over_bf16_pct,over_q4_pct"
		cat "$out"/pts/* | sort -t, -k1,1 -k2,2 -k3,3g | awk -F, '
			{ row[NR] = $0; g[NR] = $1; p[NR] = $5
			  if ($2 == "dense") d[$1] = $5; if ($2 == "q4" && $3 == 1) q[$1] = $5 }
			END { for (i = 1; i <= NR; i++)
				printf "%s,%.2f,%.2f\n", row[i], (p[i] / d[g[i]] - 1) * 100,
				       (p[i] / q[g[i]] - 1) * 100 }'
	} > "$out/quality.csv"
	rm -rf "$out/pts"
	# per config: the mean increase over the genres per budget, and the
	# realised budget at +10% over each reference, linear between the
	# grid points around it (null: never within, or always)
	python3 - "$out/quality.csv" > "$out/summary.json" <<'EOF'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out = {"ppl": {}, "budget_at_10pct": {}}
for r in rows:
    out["ppl"].setdefault(r["config"], {}).setdefault(r["budget"], {})[r["genre"]] = float(r["ppl"])
for cfg in ("bf16-spax", "q4-spax", "q4-teal"):
    pts = {}
    for r in rows:
        if r["config"] == cfg:
            p = pts.setdefault(float(r["realised"]), [[], []])
            p[0].append(float(r["over_bf16_pct"]))
            p[1].append(float(r["over_q4_pct"]))
    res = {}
    for k, name in ((0, "over_bf16_dense"), (1, "over_q4_dense")):
        xs = sorted((b, sum(v[k]) / len(v[k])) for b, v in pts.items())
        res[name] = None
        for (b0, i0), (b1, i1) in zip(xs, xs[1:]):
            if i0 > 10 >= i1:
                res[name] = round(b0 + (b1 - b0) * (i0 - 10) / (i0 - i1), 3)
                break
        if res[name] is None and xs and xs[0][1] <= 10:
            res[name] = xs[0][0]
    out["budget_at_10pct"][cfg] = res
print(json.dumps(out, indent=1))
EOF
	echo "perplexity, $PPL_TOKENS tokens a genre, windows of $WINDOW ($model, $METHOD codes)"
	column -s, -t "$out/quality.csv"
	echo "budget at +10% perplexity (mean over the genres):"
	jq -c .budget_at_10pct "$out/summary.json"
	[ -n "${KEEP:-}" ] || rm -f "$a"/*.sfimg
}

# --- speed

speed() {
	command -v fio >/dev/null || { log "fio is not installed (apt-get install fio)"; exit 1; }
	local shape=(--hidden 2048 --intermediate 5632 --layers 22 --heads 32 --kv-heads 4 --vocab 32000)
	local dt rep c name s
	[ -z "$QUICK" ] || shape=(--hidden 512 --intermediate 1376 --layers 4 --heads 8 --kv-heads 2 --vocab 4096)
	if ! [ -f "$scratch/q4.sfimg" ]; then
		log "making the model in $scratch: ${shape[*]}"
		"$fixtures/mkmodel" -o "$scratch/model" "${shape[@]}" --max-pos 2048 --no-tie \
			--tokenizer "$root/models/mix4-1m" >/dev/null
		sf-encode --model "$scratch/model" --method scalar -t "$JOBS" -q -o "$scratch/codes.sfq"
		for dt in $DTYPES; do
			sf-pack --model "$scratch/model" --codes "$scratch/codes.sfq" --dtype "$dt" -q \
				-o "$scratch/$dt.sfimg"
		done
		rm -rf "$scratch/model" "$scratch/codes.sfq"
	fi
	[ -n "${KEEP:-}" ] || trap 'rm -f "$scratch"/{bf16,q8,q4}.sfimg' EXIT
	img=$scratch/bf16.sfimg
	local bytes ram
	bytes=$(sf-pack --info "$img" | jq '.sizes.resident + .sizes.top')
	ram=$((bytes * ${RAM_PCT:-30} / 100))
	[ -z "$QUICK" ] || ram=$bytes
	flash_cgroup sf-quant
	[ -z "$cg" ] || trap 'rmdir "$cg" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -f "$scratch"/{bf16,q8,q4}.sfimg' EXIT
	log "BF16 image $bytes bytes; --ram $ram"
	: > "$out/speed.jsonl"
	: > "$out/device.jsonl"
	for rep in $(seq "$REPEATS"); do
		img=$scratch/bf16.sfimg
		jq -nc --argjson seq "$(device_gbs read 256k 32)" --argjson rand "$(device_gbs randread 256k 32)" \
			'{seq_gbs: $seq, rand_gbs: $rand}' >> "$out/device.jsonl"
		for c in "budget1|--budget 1" "tiers0.2+0.3|--k-top 0.2 --k-mid 0.3"; do
			name=${c%%|*}
			for dt in $DTYPES; do
				img=$scratch/$dt.sfimg
				drop
				# shellcheck disable=SC2086
				s=$(capped "$ram" sf-run -p "$PROMPT" -n "$N" -c 512 --temp 0 --ignore-eos \
					-t "${THREADS:-1}" --bench --ram "$ram" ${c#*|} "$img")
				jq -c --arg c "$name" --arg d "$dt" --argjson r "$rep" \
					'{config: $c, dtype: $d, repeat: $r, tg, budget,
					  mb_per_token: (.bytes_moved_per_token / 1e6), requests_per_token}' \
					<<< "$s" >> "$out/speed.jsonl"
			done
		done
	done
	jq -s 'def median: sort | .[(length - 1) / 2 | floor];
		group_by([.config, .dtype]) | map({config: .[0].config, dtype: .[0].dtype,
			budget: .[0].budget, tg: (map(.tg) | median),
			mb_per_token: (map(.mb_per_token) | median),
			requests_per_token: (map(.requests_per_token) | median)}) |
		(map(select(.dtype == "bf16")) | map({key: .config, value: .tg}) | from_entries) as $bf |
		map(. + {over_bf16: (.tg / $bf[.config])})' "$out/speed.jsonl" > "$out/speed.json"
	echo "random model ${shape[*]}, --ram $ram, -t ${THREADS:-1}, $N tokens, medians of $REPEATS"
	jq -rs 'def median: sort | .[(length - 1) / 2 | floor];
		"device: fio O_DIRECT 256 KiB reads at depth 32, sequential \(map(.seq_gbs) | median) GB/s, random \(map(.rand_gbs) | median) GB/s (medians)"' \
		"$out/device.jsonl"
	{
		echo "config,dtype,budget,tok/s,x BF16,MB/token,requests/token"
		jq -r '.[] | [.config, .dtype, (.budget * 1000 | round / 1000), (.tg * 100 | round / 100),
			(.over_bf16 * 100 | round / 100), (.mb_per_token * 100 | round / 100),
			(.requests_per_token | round)] | map(tostring) | join(",")' "$out/speed.json"
	} | tee "$out/speed.csv" | column -s, -t
}

[[ " $QUANT_PARTS " != *" quality "* ]] || quality
[[ " $QUANT_PARTS " != *" speed "* ]] || speed
