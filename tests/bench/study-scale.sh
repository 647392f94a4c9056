#!/usr/bin/env bash
# Study 6, scale: wall time and peak memory (GNU time) of every offline
# stage (sf-profile, sf-coact, sf-place, sf-encode scalar and trellis,
# sf-encode --calibrate, sf-pack) against model size, from mix4-1m through
# mix4-5m to a random model of Llama-2-7B layer shape (tests/fixtures/mkmodel:
# dim 4096, hidden 11008, 32 heads, vocab 32000, LAYERS layers), with the
# time per layer, and from it the cost of the 32 layers of a 7B model on this
# machine and on N machines (layers split across jobs: sf-coact, sf-place and
# sf-encode take --layers, mk/artifacts.mk runs them as separate jobs).
# Trellis on the 7B shape (every model under QUICK) is timed on its attn_out group only (16.8M
# weights; TRELLIS_GROUPS=all for the whole layer) and scaled by weights.
# Writes scale.csv, scale.json, scale.dat, scale.png. docs/RESULTS.md.
#   tests/bench/study-scale.sh   [QUICK=1] [LAYERS=1] [TOKENS=256] [MACHINES=8]
. "$(dirname "$0")/study-lib.bash"

w=$out/work
rm -rf "$w"
mkdir -p "$w"
T=${TOKENS:-$([ -n "$QUICK" ] && echo 32 || echo 256)}
LAYERS=${LAYERS:-1}
MACHINES=${MACHINES:-8}
tg=${TRELLIS_GROUPS:-attn_out}
corpus=$data/kjv.profile.txt

# the 7B-shape model: random weights (the I/O and offline costs depend on the
# shapes only); QUICK makes a small stand-in of the same code path
if [ -n "$QUICK" ]; then
	"$fixtures/mkmodel" -o "$w/l7b" --hidden 256 --intermediate 688 --heads 4 --kv-heads 4 \
		--vocab 1024 --max-pos 512 --layers 1 --tokenizer "$root/models/mix4-1m" >/dev/null
	models="mix4-1m:$root/models/mix4-1m l7b-mini:$w/l7b"
else
	"$fixtures/mkmodel" -o "$w/l7b" --hidden 4096 --intermediate 11008 --heads 32 --kv-heads 32 \
		--vocab 32000 --max-pos 4096 --layers "$LAYERS" --tokenizer "$root/models/mix4-1m" >/dev/null
	models="mix4-1m:$root/models/mix4-1m mix4-5m:$shared/models/mix4-5m llama2-7b-shape:$w/l7b"
fi

# timed NAME STAGE CMD...: one CSV line name,stage,seconds,peak_rss_mib
timed() {
	local n=$1 s=$2
	shift 2
	/usr/bin/time -f "%e %M" -o "$w/time" "$@" >/dev/null 2>"$w/err" || { cat "$w/err" >&2; return 1; }
	read -r sec kb < "$w/time"
	echo "$n,$s,$sec,$((kb / 1024))" >> "$out/scale.csv"
}
echo "model,stage,seconds,peak_rss_mib" > "$out/scale.csv"
: > "$out/models.jsonl"
for nm in $models; do
	n=${nm%%:*}
	m=${nm#*:}
	d=$w/$n
	mkdir -p "$d"
	jq -c --arg n "$n" '{model: $n, layers: .num_hidden_layers, dim: .hidden_size, hidden: .intermediate_size,
		vocab: .vocab_size, kv_dim: (.hidden_size / .num_attention_heads * (.num_key_value_heads // .num_attention_heads)),
		weights_per_layer: (.hidden_size * (2 * .hidden_size + 2 * .hidden_size / .num_attention_heads *
			(.num_key_value_heads // .num_attention_heads)) + 3 * .hidden_size * .intermediate_size)}' \
		"$m/config.json" >> "$out/models.jsonl"
	timed "$n" profile sf-profile -q --model "$m" --max-tokens "$T" -t 2 "$corpus" -o "$d/p.sft"
	timed "$n" coact sf-coact -q -t 2 "$d/p.sft" -o "$d/p.sfc"
	timed "$n" place sf-place -q -t 2 --method coact "$d/p.sfc" -o "$d/place.json"
	timed "$n" encode-scalar sf-encode --model "$m" --method scalar -t 2 -o "$d/s.sfq"
	if [ -z "$QUICK" ] && [ "${m#"$w"}" != "$m" ] && [ -z "${TRELLIS_7B:-}" ]; then
		:	# estimated below from mix4-5m
	elif { [ -n "$QUICK" ] || [ "${m#"$w"}" != "$m" ]; } && [ "$tg" != all ]; then
		timed "$n" "encode-trellis-$tg" sf-encode --model "$m" --groups "$tg" -t 2 -o "$d/t.sfq"
	else
		timed "$n" encode-trellis sf-encode --model "$m" -t 2 -o "$d/t.sfq"
	fi
	ctok=$([ -n "$QUICK" ] && echo 2 || echo 32)
	if [ "${m#"$w"}" = "$m" ]; then	# calibration on the real models only
		timed "$n" calibrate sf-encode --model "$m" --calibrate --codes "$d/s.sfq" -t 2 \
			--corpus "$data/kjv.calib.txt" --budgets 0.5 --calib-tokens "$ctok" --window "$ctok" -o "$d/c.json"
	fi
	timed "$n" pack sf-pack --model "$m" --placement "$d/place.json" --codes "$d/s.sfq" -o "$d/i.sfimg"
	rm -f "$d/p.sft" "$d"/*.sfq "$d/i.sfimg"
done

# per layer: the stage's time over the model's layers (trellis on one group
# scaled by the group's share of the layer's weights: attn_out is dim^2 of
# 4 dim^2 + 3 dim hidden); the 7B estimate at 32 layers and T tokens
jq -R -s --slurpfile M "$out/models.jsonl" --argjson T "$T" --argjson N "$MACHINES" '
	[split("\n")[1:][] | select(length > 0) | split(",") |
	 {model: .[0], stage: .[1], seconds: (.[2] | tonumber), peak_rss_mib: (.[3] | tonumber)}] |
	map(. as $r | ($M[] | select(.model == $r.model)) as $m |
	    (if ($r.stage | startswith("encode-trellis-")) then
		(4 * $m.dim * $m.dim + 3 * $m.dim * $m.hidden) / ($m.dim * $m.dim) else 1 end) as $f |
	    $r + {layers: $m.layers, seconds_per_layer: ($r.seconds * $f / $m.layers),
		  stage: (if ($r.stage | startswith("encode-trellis")) then "encode-trellis" else $r.stage end),
		  scaled_from_group: ($f != 1)}) |
	# the 7B trellis time from mix4-5m per weight when it was not timed
	(map(select(.model == "mix4-5m" and .stage == "encode-trellis"))[0]) as $t5 |
	($M | map(select(.model == "mix4-5m"))[0]) as $m5 | ($M | map(select(.model == "llama2-7b-shape"))[0]) as $m7 |
	if $t5 and $m7 and (map(select(.model == "llama2-7b-shape" and .stage == "encode-trellis")) | length == 0) then
		. + [{model: "llama2-7b-shape", stage: "encode-trellis", seconds: null, peak_rss_mib: null, layers: $m7.layers,
		      seconds_per_layer: ($t5.seconds_per_layer / $m5.weights_per_layer * $m7.weights_per_layer),
		      estimated_from: "mix4-5m per weight"}] else . end |
	{tokens: $T, machines: $N, stages: .,
	 estimate_7b_32_layers: [.[] | select(.model == "llama2-7b-shape") |
		{stage, seconds_one_machine: (.seconds_per_layer * 32), seconds_n_machines: (.seconds_per_layer * 32 / $N),
		 peak_rss_mib_per_job: .peak_rss_mib}]}' "$out/scale.csv" > "$out/scale.json"
# one row per stage, one column per model in the order measured (NaN: not
# run), then one per model saying how: m measured, e estimated, - not run
jq -r '.stages | reduce .[].model as $m ([]; if index([$m]) then . else . + [$m] end) | .[]' \
	"$out/scale.json" > "$out/models.txt"
paste -sd' ' "$out/models.txt" > "$out/model.txt"
jq -r --rawfile ms "$out/models.txt" '($ms | split("\n") | map(select(length > 0))) as $ms |
	.stages | group_by(.stage)[] | . as $g | [$ms[] as $m | $g | map(select(.model == $m))[0]] as $r |
	"\(.[0].stage) " + ($r | map(.seconds_per_layer // "NaN" | tostring) | join(" ")) + " " +
	($r | map(if . == null then "-" elif .estimated_from then "e" else "m" end) | join(" "))' \
	"$out/scale.json" > "$out/scale.dat"
plot scale

echo "per stage and model: seconds, seconds per layer, peak RSS (profile: $T tokens of kjv; -t 2)"
{
	echo "model,stage,seconds,seconds_per_layer,peak_rss_mib"
	jq -r '.stages[] | [.model, .stage, .seconds, (.seconds_per_layer * 1000 | round / 1000), .peak_rss_mib] |
		map(tostring) | join(",")' "$out/scale.json"
} > "$out/table.csv"
table "$out/table.csv"
if jq -e '.estimate_7b_32_layers | length > 0' "$out/scale.json" >/dev/null; then
	echo "Llama-2-7B (32 layers, $T profile tokens): one machine vs $MACHINES machines"
	jq -r '.estimate_7b_32_layers[] | "  \(.stage): \(.seconds_one_machine | round) s vs \(.seconds_n_machines | round) s, peak \(.peak_rss_mib_per_job) MiB per job"' "$out/scale.json"
fi
rm -rf "$w"
