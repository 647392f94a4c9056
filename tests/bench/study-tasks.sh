#!/usr/bin/env bash
# Study 5, profiles and tasks (SelectInfer Figures 2-4 and Table 3, Neuralink
# Table 8). Per genre: a trace of its profile split and of its test split.
# (a) Overlap of the top 40% FFN neurons (SelectInfer scores of ffn_out) of
# genre i's profile split and genre j's test split: the diagonal is within
# a genre, the rest across. (b) The profile-genre by test-genre matrix of
# runs per token and mean read length (coact placement from genre i,
# sf-place --eval on genre j's test trace) and, when sf-run runs --keep
# images, of perplexity with genre i's neurons kept (gamma 0.7). (c) When
# the tools have them: selective loading (sf-coact --select-neurons, sf-pack
# --keep) over gamma 0.5, 0.7, 0.9 with task-specific, model-specific and
# random sets, and selective computation (sf-run --compute-ratio, --static)
# over rho 0.3, 0.4, 0.6: per-genre perplexity and the bytes kept.
# Writes overlap.csv, matrix.csv, select.csv, tasks.png. docs/RESULTS.md.
#   tests/bench/study-tasks.sh   [QUICK=1] [TOKENS=2000]
. "$(dirname "$0")/study-lib.bash"

T=${TOKENS:-$([ -n "$QUICK" ] && echo 120 || echo 2000)}
density=0.3
w=$out/work
mkdir -p "$w"

# --- traces, statistics, scores and placements per genre
one_genre() {
	local g=$1
	sf-profile -q --model "$model" --density "$density" --max-tokens "$T" -t 1 --task "$g" \
		"$data/$g.profile.txt" -o "$w/$g.p.sft"
	sf-coact -q -t 1 --scores "$w/$g.p.json" "$w/$g.p.sft" -o "$w/$g.p.sfc"
	sf-place -q -t 1 --method coact "$w/$g.p.sfc" -o "$w/$g.place.json"
	rm -f "$w/$g.p.sft"
	sf-profile -q --model "$model" --density "$density" --max-tokens "$T" -t 1 --task "$g" \
		"$data/$g.test.txt" -o "$w/$g.t.sft"
	sf-coact -q -t 1 --scores "$w/$g.t.json" "$w/$g.t.sft" -o /dev/null
}
for g in $GENRES; do pool_run one_genre "$g"; done
pool_wait
p_scores=()
for g in $GENRES; do p_scores+=("$w/$g.p.json"); done
sf-coact --merge-scores "${p_scores[@]}" -o "$w/model.json"

# --- (a) overlap of the top 40%: per layer |A and B| / |A|, mean over layers
top40() {	# scores.json -> one line per layer: the top 40% ffn_out entries
	jq -c '.slots[] | select(.group == "ffn_out") | .scores | to_entries |
		sort_by(-.value, .key) | .[0:((length * 0.4) | round)] | map(.key) | sort' "$1"
}
for g in $GENRES; do top40 "$w/$g.p.json" > "$w/$g.p.top"; top40 "$w/$g.t.json" > "$w/$g.t.top"; done
{
	echo "profile_genre,test_genre,top40_overlap"
	for a in $GENRES; do
		for b in $GENRES; do
			o=$(jq -n --slurpfile x "$w/$a.p.top" --slurpfile y "$w/$b.t.top" \
				'[range($x | length) as $l | ($x[$l] - ($x[$l] - $y[$l])) | length / ($x[$l] | length)] |
				 add / length * 1000 | round / 1000')
			echo "$a,$b,$o"
		done
	done
} > "$out/overlap.csv"

# --- (b) the profile by test matrix: read length, and perplexity with --keep
keep_ok=
sf-coact --help | grep -q -- --select-neurons && {
	sf-coact --select-neurons --gamma 0.7 --delta 0.4 --task "$w/${GENRES%% *}.p.json" "$w/model.json" \
		-o "$w/probe.neurons.json" &&
	sf-pack --model "$model" --keep "$w/probe.neurons.json" -o "$w/probe.sfimg" &&
	sf-run -p x -n 1 -q --simulate "$w/probe.sfimg" >/dev/null 2>&1 && keep_ok=1
} || true
rm -f "$w/probe.sfimg"
[ -n "$keep_ok" ] || log "sf-run does not run --keep images yet: no perplexity in the matrix, no selective loading"
mk_keep() {	# genre gamma kind -> $w/keep-genre-gamma-kind.sfimg
	local g=$1 G=$2 k=$3 n=$w/keep-$1-$2-$3
	case $k in
	task) sf-coact --select-neurons --gamma "$G" --delta 0.4 --task "$w/$g.p.json" "$w/model.json" -o "$n.json" ;;
	model) sf-coact --select-neurons --gamma "$G" "$w/model.json" -o "$n.json" ;;
	random)	# a fixed pseudo-random set of the same size: Knuth's multiplicative hash order
		jq --argjson G "$G" '{format: "sparseflash-neurons", version: 2, fingerprint, shape_fingerprint,
			layers: [.slots[] | select(.group == "ffn_out") | {layer, neurons:
			([range(.scores | length) | {i: ., h: ((. * 2654435761 + 40503) % 4294967296)}] |
			 sort_by(.h) | .[0:([((length * $G) | round), 1] | max)] | map(.i) | sort)}]}' \
			"$w/model.json" > "$n.json" ;;
	esac
	sf-pack --model "$model" --keep "$n.json" -o "$n.sfimg"
}
{
	echo "profile_genre,test_genre,runs_per_token,mean_read_length,ppl_keep70,dense_ppl"
	for b in $GENRES; do
		d=$(dense_ppl "$data/$b.test.txt")
		pl=()
		for a in $GENRES; do pl+=("$w/$a.place.json"); done
		sf-place --eval "$w/$b.t.sft" --json "${pl[@]}" | jq -r '.placements[] |
			"\(([.groups[].active_per_token] | add) / ([.groups[].runs_per_token] | add)) \([.groups[].runs_per_token] | add)"' \
			> "$w/eval-$b.txt"
		i=0
		for a in $GENRES; do
			i=$((i + 1))
			read -r rl rpt < <(sed -n "${i}p" "$w/eval-$b.txt")
			p=
			if [ -n "$keep_ok" ]; then
				[ -f "$w/keep-$a-0.7-task.sfimg" ] || mk_keep "$a" 0.7 task
				p=$(ppl "$data/$b.test.txt" --simulate "$w/keep-$a-0.7-task.sfimg")
			fi
			echo "$a,$b,$(printf %.2f "$rpt"),$(printf %.4f "$rl"),$p,$d"
		done
	done
} > "$out/matrix.csv"

# --- (c) selective loading and computation
echo "genre,mode,kind,ratio,ppl,dense_ppl,increase_pct,bytes_kept" > "$out/select.csv"
gammas=${GAMMAS:-$([ -n "$QUICK" ] && echo 0.7 || echo 0.5 0.7 0.9)}
rhos=${RHOS:-$([ -n "$QUICK" ] && echo 0.4 || echo 0.3 0.4 0.6)}
full_top=$(sf-pack --model "$model" -o "$w/full.sfimg" && sf-pack --info "$w/full.sfimg" | jq .sizes.top)
if [ -n "$keep_ok" ]; then
	for g in $GENRES; do
		d=$(dense_ppl "$data/$g.test.txt")
		for G in $gammas; do
			for k in task model random; do
				[ -f "$w/keep-$g-$G-$k.sfimg" ] || mk_keep "$g" "$G" "$k"
				p=$(ppl "$data/$g.test.txt" --simulate "$w/keep-$g-$G-$k.sfimg")
				kb=$(sf-pack --info "$w/keep-$g-$G-$k.sfimg" | jq .sizes.top)
				echo "$g,load,$k,$G,$p,$d,$(jq -n "($p / $d - 1) * 10000 | round / 100"),$kb"
			done
		done
	done >> "$out/select.csv"
fi
if sf-run --help | grep -q -- --compute-ratio; then
	for g in $GENRES; do
		d=$(dense_ppl "$data/$g.test.txt")
		jq '.slots |= map(.scores |= [range(length) | ((. * 2654435761 + 40503) % 4294967296) / 4294967296])' \
			"$w/$g.p.json" > "$w/$g.random.json"
		for r in $rhos; do
			for k in task model random; do
				case $k in task) s=$w/$g.p.json ;; model) s=$w/model.json ;; random) s=$w/$g.random.json ;; esac
				p=$(ppl "$data/$g.test.txt" --simulate --compute-ratio "$r" --static "$s" "$w/full.sfimg") || p=
				[ -n "$p" ] && echo "$g,compute,$k,$r,$p,$d,$(jq -n "($p / $d - 1) * 10000 | round / 100"),$full_top"
			done
		done
	done >> "$out/select.csv"
else
	log "sf-run has no --compute-ratio yet: no selective computation"
fi

# plot: overlap heat map, read length matrix, selective loading curves
awk -F, 'NR > 1 { print $3 }' "$out/overlap.csv" | paste -d' ' $(for g in $GENRES; do echo -; done) > "$out/overlap.dat"
awk -F, 'NR > 1 { print $4 }' "$out/matrix.csv" | paste -d' ' $(for g in $GENRES; do echo -; done) > "$out/readlen.dat"
echo "$GENRES" > "$out/genres.txt"
awk -F, 'NR > 1 && $2 == "load" { print $3, $4, $7 }' "$out/select.csv" | sort -k1,1 -k2,2g |
	awk '{ s[$1 " " $2] += $3; c[$1 " " $2]++ } END { for (k in s) print k, s[k] / c[k] }' |
	sort -k1,1 -k2,2g | awk '$1 != m { if (NR > 1) print "\n"; m = $1; print "# " m } { print $2, $3 }' > "$out/select.dat"
awk -F, 'NR > 1 && $2 == "load" { print $3 }' "$out/select.csv" | sort -u | paste -sd' ' > "$out/select-kinds.txt"
plot tasks

echo "top-40% neuron overlap (rows: profile split of a genre, columns: test split):"
table "$out/overlap.csv"
echo "profile genre x test genre:"
table "$out/matrix.csv"
if [ "$(wc -l < "$out/select.csv")" -gt 1 ]; then
	echo "selective loading / computation (mean over genres):"
	awk -F, 'NR > 1 { k = $2 "," $3 "," $4; s[k] += $7; c[k]++ } END { for (k in s) printf "%s,%.2f\n", k, s[k] / c[k] }' \
		"$out/select.csv" | sort | { echo "mode,kind,ratio,mean_increase_pct"; cat; } > "$out/select-mean.csv"
	table "$out/select-mean.csv"
fi
rm -f "$w"/*.sft "$w"/*.sfimg
