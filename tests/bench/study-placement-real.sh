#!/usr/bin/env bash
# Placement on real activations (issue 37; Neuralink's measure): for each
# density, placements learned on the profile splits (identity, frequency,
# coact) are evaluated by sf-place --eval on each genre's test split,
# profiled at the same density: runs and bytes per token (4 KiB blocks, no
# collapse), mean read length = active entries / runs, per genre and per
# group kind. placebound gives, on the profile statistics, what 2-opt local
# search adds to coact and the read length no order can beat (Held and
# Karp's bound; the two-best-partners one is loose). docs/RESULTS.md.
#   tests/bench/study-placement-real.sh [QUICK=1] [DENSITIES="0.1 0.3"]
#       [MODEL=dir] [PROFILE_TOKENS=4000] [TEST_TOKENS=2000] [METHODS=...]
# Writes $out/placement.csv (density,genre,placement,runs,read length,KiB),
# groups.csv (per group kind, all genres), bound.csv; the traces and
# placements stay in $out/work (WORK=) so a rerun skips them.
# Run time: bounded by the tokens (8 traces and one co-activation pass per
# density); on the shared 2-core EPYC under load 6-11, mix4-46m with
# TEST_TOKENS=4000, 41 minutes for the five densities, profiling most of
# it; QUICK=1 (mix4-1m, one density) 2 s.
. "$(dirname "$0")/study-lib.bash"

if [ -n "$QUICK" ]; then
	DENSITIES=${DENSITIES:-0.3}
	PROFILE_TOKENS=${PROFILE_TOKENS:-300}
	TEST_TOKENS=${TEST_TOKENS:-200}
else
	model=${MODEL:-$shared/models/mix4-46m}
	DENSITIES=${DENSITIES:-0.1 0.2 0.3 0.4 0.5}
	PROFILE_TOKENS=${PROFILE_TOKENS:-4000}
	TEST_TOKENS=${TEST_TOKENS:-2000}
fi
METHODS=${METHODS:-identity frequency coact}
[ -d "$model" ] || { echo "study-$study: $model absent" >&2; exit 77; }
basename "$model" > "$out/model.txt"
work=${WORK:-$out/work}
mkdir -p "$work"
placebound=$benchbin/placebound
log "model $(basename "$model"), densities $DENSITIES, $PROFILE_TOKENS profile and" \
	"$TEST_TOKENS test tokens per genre"

# profile FILE DENSITY TOKENS OUT: a trace, unless already there
profile() {
	[ -s "$4" ] && return 0
	sf-profile -q --model "$model" --density "$2" --max-tokens "$3" -t 1 \
		--task "$(basename "$1" | cut -d. -f1)" "$1" -o "$4.tmp" && mv "$4.tmp" "$4"
}

: > "$work/eval.jsonl"
: > "$out/bound.jsonl"
for d in $DENSITIES; do
	w=$work/d$d
	mkdir -p "$w"
	for g in $GENRES; do
		pool_run profile "$data/$g.profile.txt" "$d" "$PROFILE_TOKENS" "$w/$g.profile.sft"
		pool_run profile "$data/$g.test.txt" "$d" "$TEST_TOKENS" "$w/$g.test.sft"
	done
	pool_wait
	[ -s "$w/coact.sfc" ] || sf-coact -q -t "$JOBS" "$w"/*.profile.sft -o "$w/coact.sfc"
	for m in $METHODS; do
		[ -s "$w/$m.json" ] || sf-place -q -t "$JOBS" --method "$m" "$w/coact.sfc" -o "$w/$m.json"
	done
	if [ -x "$placebound" ]; then
		"$placebound" "$w/coact.sfc" | jq -c --argjson d "$d" '. + {density: $d}' >> "$out/bound.jsonl"
	fi
	pls=()
	for m in $METHODS; do pls+=("$w/$m.json"); done
	for g in $GENRES; do
		sf-place --eval "$w/$g.test.sft" --model "$model" --json "${pls[@]}" |
			jq -c --argjson d "$d" --arg g "$g" '.placements[] | {density: $d, genre: $g,
				placement: (.placement | split("/") | last | rtrimstr(".json")),
				groups: [.groups[] | {layer, group, entries, active_per_token, runs_per_token,
					kib: (.collapse[0].bytes_per_token / 1024)}]}' >> "$work/eval.jsonl"
	done
	log "density $d done"
done
# per density, genre ("all": the four summed) and placement
jq -r -s '
	def tot: {active: (map(.active_per_token) | add), runs: (map(.runs_per_token) | add),
		  kib: (map(.kib) | add)};
	(map(. as $r | {density, genre, placement} + ($r.groups | tot))) as $rows |
	($rows + [$rows | group_by([.density, .placement])[] |
		{density: .[0].density, genre: "all", placement: .[0].placement,
		 active: (map(.active) | add / length), runs: (map(.runs) | add / length),
		 kib: (map(.kib) | add / length)}]) |
	sort_by(.density, .genre, .placement)[] |
	[.density, .genre, .placement, (.active | round), (.runs | round),
	 (.active / .runs * 1000 | round / 1000), (.kib | round)] | map(tostring) | join(",")' \
	"$work/eval.jsonl" | { echo "density,genre,placement,active_per_token,runs_per_token,read_length,kib_per_token"; cat; } \
	> "$out/placement.csv"
# per density, group kind and placement, the genres' mean
jq -r -s '
	[.[] | . as $r | .groups[] | {density: $r.density, placement: $r.placement, group,
		active: .active_per_token, runs: .runs_per_token, kib}] |
	group_by([.density, .group, .placement])[] |
	{density: .[0].density, group: .[0].group, placement: .[0].placement,
	 active: (map(.active) | add), runs: (map(.runs) | add), kib: (map(.kib) | add)} |
	[.density, .group, .placement, (.active / .runs * 1000 | round / 1000)] | map(tostring) | join(",")' \
	"$work/eval.jsonl" | { echo "density,group,placement,read_length"; cat; } > "$out/groups.csv"
if [ -s "$out/bound.jsonl" ]; then
	jq -r -s 'group_by(.density)[] | . as $s |
		def rl(k): ($s | map(.active_per_token) | add) / ($s | map(.runs_per_token[k]) | add);
		[.[0].density, (rl("identity"), rl("frequency"), rl("coact"), rl("refined"),
		 rl("held_karp"), rl("bound")) | . * 1000 | round / 1000] | map(tostring) | join(",")' \
		"$out/bound.jsonl" | { echo "density,identity,frequency,coact,coact_2opt,held_karp,two_best"; cat; } \
		> "$out/bound.csv"
fi

echo "test splits (sf-place --eval; placements from the profile splits):"
table "$out/placement.csv"
echo "read length per group kind (the genres' mean):"
table "$out/groups.csv"
if [ -s "$out/bound.csv" ]; then
	echo "on the profile statistics themselves (expected read length; bound: no order does better):"
	table "$out/bound.csv"
fi
