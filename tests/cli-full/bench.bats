#!/usr/bin/env bats
# The artifacts rules (mk/artifacts.mk) and the quick variants of the study
# scripts (tests/bench/study-*.sh, QUICK=1: the embedded mix4-1m, a few
# tokens) so they cannot rot: every file is written and the figures are
# sane. Not timed: the figures themselves are docs/RESULTS.md's business.

load ../cli/helpers

setup_file() {
	file_scratch bench
	export ART=$D/art QUICK=1 SF_ROOT SF_BIN SF_SHARED SF_FIXTURES
	export SF_BENCH=${SF_BENCH:-$(dirname "$SF_FIXTURES")/bench}
}

teardown_file() {
	rm -rf "$D"
}

# the artifacts of the quick studies (tests/bench/study-lib.bash, QUICK)
art() {
	local c=() k=() g
	for g in fortunes gcide kjv man; do	# the order of make's $(wildcard)
		c+=("$SF_SHARED/data/mix4/$g.profile.txt")
		k+=("$SF_SHARED/data/mix4/$g.calib.txt")
	done
	make -C "$SF_ROOT" artifacts SF_BIN="$SF_BIN" MODEL="$MODEL" OUT="$ART" CORPUS="${c[*]}" \
		CALIB_CORPUS="${k[*]}" PROFILE_TOKENS=200 CALIB_TOKENS=8 CALIB_WINDOW=8 BUDGETS=0.3,0.6 \
		METHODS=scalar "$@"
}

study() {	# NAME: run the quick study into $D/NAME
	STUDY_OUT=$D/$1 "$SF_ROOT/tests/bench/study-$1.sh"
}

has_png() {	# the plot, when gnuplot is there to draw it
	! command -v gnuplot >/dev/null || [ -s "$1" ]
}

@test "make artifacts builds every artifact, a second run does nothing" {
	need_shared
	run --separate-stderr art -s -j2
	[ "$status" -eq 0 ]
	for f in trace/kjv.profile.sft coact/L0.sfc coact/L3.sfc coact.sfc scores.json place-identity.json \
		place-frequency.json place-coact.json codes/scalar-L0.sfq codes-scalar.sfq calib/scalar-L3.json \
		calib-scalar.json \
		identity-scalar.sfimg frequency-scalar.sfimg coact-scalar.sfimg; do
		[ -s "$ART/$f" ] || { echo "missing $f"; false; }
	done
	sf-pack --verify "$ART/coact-scalar.sfimg"
	[ "$(sf-pack --info "$ART/coact-scalar.sfimg" | jq -c .tiers.budgets)" = "[0.3,0.6]" ]
	run art
	[ "$status" -eq 0 ]
	[[ "$output" == *"Nothing to be done for 'artifacts'."* ]]
}

@test "make artifacts: new budgets recalibrate and repack, traces and codes stay" {
	need_shared
	art -s -j2 >/dev/null
	local t0 c0
	t0=$(stat -c %Y.%y "$ART/trace/kjv.profile.sft")
	c0=$(stat -c %Y.%y "$ART/codes-scalar.sfq")
	run art BUDGETS=0.3
	[ "$status" -eq 0 ]
	[[ "$output" == *"--calibrate"* ]]
	[[ "$output" != *"sf-profile"* ]]
	[ "$(stat -c %Y.%y "$ART/trace/kjv.profile.sft")" = "$t0" ]
	[ "$(stat -c %Y.%y "$ART/codes-scalar.sfq")" = "$c0" ]
	[ "$(sf-pack --info "$ART/coact-scalar.sfimg" | jq -c .tiers.budgets)" = "[0.3]" ]
	art -s -j2 >/dev/null	# back to the studies' budgets
}

@test "make artifacts without MODEL is a usage error" {
	run make -s -C "$SF_ROOT" artifacts SF_BIN="$SF_BIN" MODEL=
	[ "$status" -eq 2 ]
	[[ "$output" == *"usage: make artifacts MODEL=dir"* ]]
}

@test "study quality: perplexity rises as the budget falls, tiers beat TEAL" {
	need_shared
	run --separate-stderr study quality
	[ "$status" -eq 0 ]
	[[ "${lines[-1]}" == "teal "* ]]	# the table last
	[ -s "$D/quality/quality.csv" ] && [ -s "$D/quality/summary.json" ]
	has_png "$D/quality/quality.png"
	# TEAL per genre, and every method over the genres: perplexity at the
	# lowest budget above the one at budget 1 (two tiers from 8 calibration
	# tokens can beat dense on one genre of the tiny model)
	jq -e 'all(.[]; .curve[0].mean_increase_pct > (.curve[] | select(.budget == 1) | .mean_increase_pct))' \
		"$D/quality/summary.json"
	run awk -F, 'NR > 1 && $2 == "teal" { k = $1 "," $2; if (!(k in lo) || $3 < b[k]) { b[k] = $3; lo[k] = $5 }
		if ($3 == 1) hi[k] = $5 } END { for (k in lo) if (!(lo[k] > hi[k])) { print "not rising: " k; bad = 1 }
		exit bad }' "$D/quality/quality.csv"
	[ "$status" -eq 0 ]
	# at budget 0.3 the calibrated tiers lose less than one tier at density 0.3
	jq -e '(map(select(.method == "teal"))[0].curve[] | select(.budget == 0.3) | .mean_increase_pct) as $t |
		(map(select(.method == "spax-scalar"))[0].curve[] | select(.budget == 0.3) | .mean_increase_pct) < $t' \
		"$D/quality/summary.json"
}

@test "study placement: coact needs fewer runs, bytes needed never exceed bytes moved" {
	need_shared
	run --separate-stderr study placement
	[ "$status" -eq 0 ]
	# 3 placements x 2 collapse settings at each budget of study 1 (+10%, +20%)
	local n
	n=$(($(wc -l < "$D/placement/placement.csv") - 1))
	[ "$n" -ge 6 ] && [ $((n % 6)) -eq 0 ]
	has_png "$D/placement/placement.png"
	jq -e '(.placements | map({(.placement): .runs_per_token}) | add) as $r | $r.coact < $r.identity' \
		"$D/placement/eval.json"
	jq -e -s 'all(.bytes_needed_per_token <= .bytes_moved_per_token and .bytes_needed_per_token > 0 and .p50_ms > 0)' \
		"$D/placement/flash.jsonl"
	# collapse joins runs: never more requests than without it
	jq -e -s 'group_by(.name)[] | (map(select(.collapse_gap == "0"))[0].requests_per_token) >=
		(map(select(.collapse_gap == "auto"))[0].requests_per_token)' "$D/placement/flash.jsonl"
}

@test "study placement-real: every density, genre and placement; coact beats identity, no order beats Held-Karp" {
	need_shared
	run --separate-stderr study placement-real
	[ "$status" -eq 0 ]
	# QUICK: density 0.3, kjv and man and their mean, 3 placements
	[ "$(($(wc -l < "$D/placement-real/placement.csv") - 1))" -eq 9 ]
	awk -F, '$2 == "all" { r[$3] = $5 } END { exit !(r["coact"] < r["identity"]) }' \
		"$D/placement-real/placement.csv"
	# on the statistics it was learned on: identity <= coact <= 2-opt <= the bounds
	[ -s "$D/placement-real/bound.csv" ]
	awk -F, 'NR > 1 { ok = $2 <= $4 && $4 <= $5 && $5 <= $6 + 1e-3 && $6 <= $7 + 1e-3 }
		END { exit !(NR == 2 && ok) }' "$D/placement-real/bound.csv"
}

@test "study cache: a larger cache hits more and moves fewer bytes" {
	need_shared
	run --separate-stderr study cache
	[ "$status" -eq 0 ]
	[ -s "$D/cache/cache.csv" ]
	has_png "$D/cache/cache.png"
	jq -e '.curves | length == 3 and all(.points | (.[0].hit_rate == 0) and (last.hit_rate > 0) and
		(last.bytes_moved_per_token < .[0].bytes_moved_per_token))' "$D/cache/summary.json"
}

@test "study e2e: every configuration, sparse ones need fewer bytes than dense offload" {
	need_shared
	run --separate-stderr study e2e
	[ "$status" -eq 0 ]
	[ "$(wc -l < "$D/e2e/e2e.csv")" -eq 9 ]
	has_png "$D/e2e/e2e.png"
	jq -e '(map({(.name): .}) | add) as $c |
		# reads ahead of the pass after the last one are read and not
		# needed: a few percent of the bytes of a short run
		($c["dense-offload"].moved_over_needed | . >= 1 and . < 1.05) and
		$c.spax.bytes_needed_per_token < $c["dense-offload"].bytes_needed_per_token and
		all(.[] | select(.name != "dense-ram"); .bytes_needed_per_token <= .bytes_moved_per_token)' \
		"$D/e2e/e2e.json"
}

@test "study tasks: top neurons overlap more within a genre than across" {
	need_shared
	run --separate-stderr study tasks
	[ "$status" -eq 0 ]
	has_png "$D/tasks/tasks.png"
	[ "$(wc -l < "$D/tasks/matrix.csv")" -eq 5 ]
	run awk -F, 'NR > 1 { if ($1 == $2) d[$1] = $3; else if ($3 > o[$1]) o[$1] = $3 }
		END { for (g in d) if (!(d[g] > o[g])) { print g; bad = 1 } exit bad }' "$D/tasks/overlap.csv"
	[ "$status" -eq 0 ]
}

@test "study scale: every stage of every model timed" {
	need_shared
	run --separate-stderr study scale
	[ "$status" -eq 0 ]
	has_png "$D/scale/scale.png"
	for s in profile coact place encode-scalar encode-trellis calibrate pack; do
		jq -e --arg s "$s" '[.stages[] | select(.stage == $s and .model == "mix4-1m" and .seconds >= 0 and
			.peak_rss_mib > 0)] | length == 1' "$D/scale/scale.json"
	done
	jq -e '[.stages[] | select(.model == "l7b-mini")] | length == 6' "$D/scale/scale.json"
}

@test "study flash7b: the tiers need fewer bytes than dense offload at a bigger shape" {
	need_shared
	run --separate-stderr study flash7b
	[ "$status" -eq 0 ]
	[ "$(wc -l < "$D/flash7b/flash7b.csv")" -eq 5 ]
	jq -e -s '.[0] as $d | $d.name == "dense-offload" and
		($d.moved_over_needed | . >= 1 and . < 1.05) and
		.[2].bytes_needed_per_token < $d.bytes_needed_per_token and
		all(.[1:][]; .bytes_needed_per_token <= $d.bytes_needed_per_token and
		.bytes_needed_per_token <= .bytes_moved_per_token)' "$D/flash7b/flash7b.jsonl"
}

@test "study speculative: plain, mix4-1m and self-drafted rows per genre and budget, fewer bytes per token" {
	need_shared
	run --separate-stderr study speculative
	[ "$status" -eq 0 ]
	[ -s "$D/speculative/speculative.csv" ]
	# 2 genres x 2 budgets x 3 configurations, the speed-ups of 2 x 3
	jq -e '(.rows | length == 12) and (.geomean | length == 6) and
		all(.rows[] | select(.config != "plain"); .tokens_per_pass >= 1) and
		all(.rows[] | select(.config == "mix4-1m"); .acceptance == 1) and
		all(.rows | group_by([.genre, .budget])[];
		    (map(select(.config == "plain"))[0].bytes_per_token) >
		    (map(select(.config == "mix4-1m"))[0].bytes_per_token))' "$D/speculative/summary.json"
}

@test "quant: every genre scored for each top tier; q4 at budget 1 moves at most about 18/64 of BF16's bytes" {
	need_shared
	run --separate-stderr env STUDY_OUT="$D/quant" SCRATCH="$D/quant-scratch" REPEATS=1 N=4 \
		"$SF_ROOT/tests/bench/quant.sh"
	[ "$status" -eq 0 ]
	# kjv and man, 10 configurations each, and the header
	[ "$(wc -l < "$D/quant/quality.csv")" -eq 21 ]
	jq -e '.budget_at_10pct | has("q4-spax") and has("q4-teal")' "$D/quant/summary.json"
	# in the same --ram a q4 image holds groups whole (sf-run(1), --ram), which
	# then cost no reads: at most its bytes' share, and still some reads
	jq -e 'map(select(.config == "budget1")) | map({key: .dtype, value: .mb_per_token}) |
		from_entries | .q4 > 0 and .q4 / .bf16 < 0.32' "$D/quant/speed.json"
}
