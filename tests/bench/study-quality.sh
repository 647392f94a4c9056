#!/usr/bin/env bash
# Study 1, quality against bytes (SpAx Figure 5): perplexity increase on
# every genre's test split against the budget for TEAL (one tier, the
# density is the budget), SpAx with two-scale scalar codes and SpAx with
# trellis codes (calibrated tiers), budgets 0.1 to 1, and the budget each
# needs at +10% and +20%; and SelectInfer's selective computation
# (--compute-ratio RHO with the artifacts' model scores as --static, the
# budget being RHO: the share of FFN neurons computed in the layers it
# restricts, --dense-layers' default leaving the first and last whole),
# when the artifacts hold scores.json. Perplexity through --simulate (equal to the
# flash path, tests/cli/sf-run-image.bats), so it is exact and not noisy.
# Writes quality.csv, summary.json, quality.png. docs/RESULTS.md.
#   tests/bench/study-quality.sh   [QUICK=1] [PPL_TOKENS=1024] [STUDY_OUT=dir]
. "$(dirname "$0")/study-lib.bash"

artifacts
methods=()
for m in trellis scalar; do
	[ -f "$art/identity-$m.sfimg" ] && methods+=("$m")
done
img0=$art/identity-${methods[0]}.sfimg
teal_grid=${TEAL_GRID:-0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1}
[ -n "$QUICK" ] && teal_grid=${TEAL_GRID:-0.3 0.6 1}
rho_grid=${RHO_GRID:-0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9}
[ -n "$QUICK" ] && rho_grid=${RHO_GRID:-0.3 0.6}
[ -f "$art/scores.json" ] || rho_grid=

# one line per point: genre,method,budget,realised,ppl
point() {	# genre method budget realised sf-run-args...
	local g=$1 m=$2 b=$3 r=$4 p
	shift 4
	p=$(ppl "$data/$g.test.txt" "$@")
	echo "$g,$m,$b,$r,$p" > "$out/pts/$g-$m-$b"
}
rm -rf "$out/pts"
mkdir -p "$out/pts"
t0=$(date +%s)
for g in $GENRES; do
	pool_run point "$g" dense 1 1 --model "$model"
	for d in $teal_grid; do
		pool_run point "$g" teal "$d" "$d" --density "$d" --simulate "$img0"
	done
	for r in $rho_grid; do
		pool_run point "$g" selectinfer "$r" "$r" --compute-ratio "$r" --static "$art/scores.json" \
			--simulate "$img0"
	done
	for m in "${methods[@]}"; do
		for b in $(budgets_of "$art/identity-$m.sfimg"); do
			pool_run point "$g" "spax-$m" "$b" "$(realised_of "$art/identity-$m.sfimg" "$b")" \
				--budget "$b" --simulate "$art/identity-$m.sfimg"
		done
		# budget 1 is every entry top tier: dense, as TEAL at 1
		pool_run point "$g" "spax-$m" 1 1 --budget 1 --simulate "$art/identity-$m.sfimg"
	done
done
pool_wait
log "$(($(date +%s) - t0)) s of perplexity runs"

# increase over the genre's dense perplexity
{
	echo "genre,method,budget,realised,ppl,dense_ppl,increase_pct"
	cat "$out"/pts/* | sort -t, -k1,1 -k2,2 -k3,3g | awk -F, '
		{ row[NR] = $0; g[NR] = $1; m[NR] = $2; p[NR] = $5; if ($2 == "dense") d[$1] = $5 }
		END { for (i = 1; i <= NR; i++) if (m[i] != "dense")
			printf "%s,%s,%.2f\n", row[i], d[g[i]], (p[i] / d[g[i]] - 1) * 100 }'
} > "$out/quality.csv"
rm -rf "$out/pts"

# per method: the mean increase over the genres per budget, and the budget
# at +10% and +20%: interpolated on the realised budget between the two grid
# points around it, and the smallest grid point within (what later studies run)
jq -R -s '
	[split("\n")[1:][] | select(length > 0) | split(",") |
	 {genre: .[0], method: .[1], budget: (.[2] | tonumber), realised: (.[3] | tonumber),
	  increase: (.[6] | tonumber)}] |
	group_by(.method) | map(
		(group_by(.budget) | map({budget: .[0].budget, realised: (map(.realised) | add / length),
		  mean_increase_pct: (map(.increase) | add / length),
		  max_increase_pct: (map(.increase) | max)}) | sort_by(.budget)) as $c |
		{method: .[0].method, curve: $c, at_pct: [10, 20] | map(. as $p |
			($c | map(select(.mean_increase_pct <= $p)) | first) as $ok |
			($c | to_entries | map(select(.value.mean_increase_pct <= $p)) | first) as $e |
			{pct: $p, budget_grid: ($ok.budget // 1),
			 budget: (if $e == null then 1 elif $e.key == 0 then $e.value.realised else
				$c[$e.key - 1] as $a | $e.value as $b |
				$a.realised + ($b.realised - $a.realised) *
				($a.mean_increase_pct - $p) / ($a.mean_increase_pct - $b.mean_increase_pct) end)})})' \
	"$out/quality.csv" > "$out/summary.json"

# one data block per method for gnuplot: realised budget, mean increase
jq -r '.[] | "# \(.method)", (.curve[] | "\(.realised) \(.mean_increase_pct)"), "", ""' \
	"$out/summary.json" > "$out/quality.dat"
for g in $GENRES; do
	awk -F, -v g="$g" 'NR > 1 && $1 == g { print $2, $4, $7 }' "$out/quality.csv" |
		sort -k1,1 -k2,2g | awk '$1 != m { if (NR > 1) print "\n"; m = $1; print "# " m } { print $2, $3 }'
	echo; echo
done > "$out/genres.dat"
echo "$GENRES" | tr ' ' '\n' > "$out/genres.txt"
jq -r '.[].method' "$out/summary.json" > "$out/methods.txt"
plot quality

{
	echo "method,budget_at_10pct,grid_at_10pct,budget_at_20pct,grid_at_20pct"
	jq -r '.[] | [.method, (.at_pct[] | (.budget * 1000 | round / 1000), .budget_grid)] | map(tostring) | join(",")' \
		"$out/summary.json"
} > "$out/table.csv"
table "$out/table.csv"
