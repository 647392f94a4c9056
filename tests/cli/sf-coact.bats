#!/usr/bin/env bats
# sf-coact: statistics from traces, merges, --layers splits, scores, the
# neurons file of --select-neurons against a recomputation in jq, a
# mixture's experts and their steps against a recount of the trace
# (tests/oracle/recount.py), and one clear error line for damaged inputs
# and inputs of other models.

load helpers

setup_file() {
	local t=$BATS_FILE_TMPDIR
	printf 'In the beginning God created the heaven and the earth.\n\nAnd God said, Let there be light: and there was light.\n' >"$t/a.txt"
	printf 'NAME\n    ls - list directory contents\n\nSYNOPSIS\n    ls [OPTION]... [FILE]...\n' >"$t/b.txt"
	sf-profile -q -m "$MODEL" --task kjv "$t/a.txt" -o "$t/a.sft"
	sf-profile -q -m "$MODEL" --task man "$t/b.txt" -o "$t/b.sft"
	# another model: same tokenizer, another shape, so another fingerprint
	"$SF_FIXTURES/mkmodel" -o "$t/other" --hidden 64 --intermediate 192 --layers 2 \
		--heads 2 --kv-heads 1 --tokenizer "$MODEL" >/dev/null
	sf-profile -q -m "$t/other" "$t/a.txt" -o "$t/other.sft"
	# SelectInfer scores: two tasks, their model-specific merge, another model's
	sf-coact -q "$t/a.sft" --scores "$t/kjv.json" -o /dev/null
	sf-coact -q "$t/b.sft" --scores "$t/man.json" -o /dev/null
	sf-coact --merge-scores "$t/kjv.json" "$t/man.json" -o "$t/model.json"
	sf-coact -q "$t/other.sft" --scores "$t/other.json" -o /dev/null
	# a random Mixtral: 4 experts, 2 a token
	"$SF_FIXTURES/mkmodel" -o "$t/mix" --arch mixtral --experts 4 --experts-used 2 \
		--layers 3 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 1024 \
		--seed 3 --tokenizer "$MODEL" >/dev/null
	sf-profile -q -m "$t/mix" --density 0.1 "$t/a.txt" "$t/b.txt" -o "$t/mix.sft"
}

T() { echo "$BATS_FILE_TMPDIR/$1"; }
slots() { sf-coact -q --info "$1" | jq -c '[.slots[] | [.layer, .group, .tokens, .crc]]'; }

@test "--help prints usage with an example and exits 0" {
	run sf-coact --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"Usage: sf-coact [options] [TRACE...]"* ]]
	[[ "$output" == *"Examples:"* ]]
}

@test "--version prints the version" {
	run sf-coact --version
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^sf-coact\ \(sparseflash\)\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
}

@test "an unknown option is a usage error" {
	run sf-coact --frobnicate
	[ "$status" -eq 2 ]
	[ "${lines[-1]}" = "Try 'sf-coact --help'." ]
}

@test "-o /dev/null writes to it: it stays a character device" {
	sf-coact -q "$(T a.sft)" -o /dev/null
	[ -c /dev/null ]
}

@test "-o a FIFO streams the output to its reader" {
	local f=$BATS_TEST_TMPDIR/fifo
	mkfifo "$f"
	cat "$f" >"$BATS_TEST_TMPDIR/got.sfc" &
	sf-coact -q -t 1 "$(T a.sft)" -o "$f"
	wait
	[ -p "$f" ]
	sf-coact -q -t 1 "$(T a.sft)" -o "$BATS_TEST_TMPDIR/want.sfc"
	cmp "$BATS_TEST_TMPDIR/got.sfc" "$BATS_TEST_TMPDIR/want.sfc"
}

@test "-o naming an input is refused, exit 1, the input unchanged" {
	local in=$BATS_TEST_TMPDIR/in.sft sum
	cp "$(T a.sft)" "$in"
	sum=$(md5sum <"$in")
	run --separate-stderr sf-coact -q "$in" -o "$in"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $in: is also an input ($in): refusing to overwrite it" ]
	[ "$(md5sum <"$in")" = "$sum" ]
	# through a symlink, and for --merge-scores and --scores too
	ln -s "$in" "$BATS_TEST_TMPDIR/link"
	run --separate-stderr sf-coact -q "$in" -o "$BATS_TEST_TMPDIR/link"
	[ "$status" -eq 1 ]
	cp "$(T kjv.json)" "$BATS_TEST_TMPDIR/k.json"
	run --separate-stderr sf-coact --merge-scores "$BATS_TEST_TMPDIR/k.json" "$(T man.json)" -o "$BATS_TEST_TMPDIR/k.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $BATS_TEST_TMPDIR/k.json: is also an input ($BATS_TEST_TMPDIR/k.json): refusing to overwrite it" ]
	cmp "$BATS_TEST_TMPDIR/k.json" "$(T kjv.json)"
	[ "$(md5sum <"$in")" = "$sum" ]
}

@test "--layers: the one layers grammar, one range here" {
	run --separate-stderr sf-coact --layers 99999999999999999999 "$(T a.sft)"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-coact: --layers: layer 99999999999999999999 is out of range: expected 0..4095" ]
	run --separate-stderr sf-coact --layers 0,2 "$(T a.sft)"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-coact: --layers: '0,2': expected one range N-M here" ]
	run --separate-stderr sf-coact --layers 1:1 "$(T a.sft)"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-coact: --layers: '1:1': F:L (the first F and the last L layers) needs the model's layer count; give N-M" ]
	sf-coact -q --layers all "$(T a.sft)" -o "$BATS_TEST_TMPDIR/all.sfc"
	sf-coact -q "$(T a.sft)" -o "$BATS_TEST_TMPDIR/whole.sfc"
	[ "$(slots "$BATS_TEST_TMPDIR/all.sfc")" = "$(slots "$BATS_TEST_TMPDIR/whole.sfc")" ]
}

@test "the memory needed is stated before allocating, with -v" {
	run --separate-stderr sf-coact -v "$(T a.sft)" -o "$BATS_TEST_TMPDIR/a.sfc"
	[ "$status" -eq 0 ]
	# 4 layers x (3 x 128 + 384 entries): pairs, counts, sums and bit vectors
	[ "${stderr_lines[0]}" = "sf-coact: 4 layer(s), 16 layer-group(s): statistics need 3188736 bytes (3.0 MiB)" ]
}

@test "--max-memory refuses with the figure and writes nothing" {
	run --separate-stderr sf-coact -q --max-memory 1M "$(T a.sft)" -o "$BATS_TEST_TMPDIR/a.sfc"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: statistics need 3188736 bytes (3.0 MiB), more than --max-memory 1048576; restrict with --layers" ]
	[ ! -e "$BATS_TEST_TMPDIR/a.sfc" ]
}

@test "traces are read from standard input" {
	sf-coact -q <"$(T a.sft)" >"$BATS_TEST_TMPDIR/s.sfc"
	sf-coact -q "$(T a.sft)" -o "$BATS_TEST_TMPDIR/f.sfc"
	[ "$(slots "$BATS_TEST_TMPDIR/s.sfc")" = "$(slots "$BATS_TEST_TMPDIR/f.sfc")" ]
}

@test "merge(a, b) equals a and b fed together" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$t/a.sfc"
	sf-coact -q "$(T b.sft)" -o "$t/b.sfc"
	sf-coact -q "$(T a.sft)" "$(T b.sft)" -o "$t/ab.sfc"
	sf-coact -q --merge "$t/a.sfc" "$t/b.sfc" -o "$t/m.sfc"
	[ "$(slots "$t/m.sfc")" = "$(slots "$t/ab.sfc")" ]
	run sf-coact -q --info "$t/m.sfc"
	[ "$(echo "$output" | jq -c '.slots[0].tasks')" = "$(sf-coact -q --info "$t/ab.sfc" | jq -c '.slots[0].tasks')" ]
}

@test "--merge and --info read slot by slot: every count and sum, one slot's pairs" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$t/a.sfc"
	# 4 layers x 768 entries x 16 bytes, and the pairs of 384 entries
	run --separate-stderr sf-coact -v --merge "$t/a.sfc" -o "$t/m.sfc"
	[ "$status" -eq 0 ]
	[ "${stderr_lines[0]}" = "sf-coact: 4 layer(s), 16 layer-group(s): statistics need 343296 bytes (0.3 MiB)" ]
	sf-coact -q --max-memory 343296 --merge "$t/a.sfc" -o "$t/m.sfc"
	[ "$(slots "$t/m.sfc")" = "$(slots "$t/a.sfc")" ]
	run --separate-stderr sf-coact -q --max-memory 343295 --info "$t/a.sfc"
	[ "$status" -eq 1 ]
	[ -z "$output" ]
}

@test "--layers splits merged equal the whole" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$t/whole.sfc"
	sf-coact -q --layers 0-1 "$(T a.sft)" -o "$t/lo.sfc"
	sf-coact -q --layers 2-3 "$(T a.sft)" -o "$t/hi.sfc"
	[ "$(sf-coact -q --info "$t/lo.sfc" | jq -c '[.slots[].layer] | unique')" = "[0,1]" ]
	sf-coact -q --merge "$t/hi.sfc" "$t/lo.sfc" -o "$t/m.sfc"
	[ "$(slots "$t/m.sfc")" = "$(slots "$t/whole.sfc")" ]
	# and --layers picks a layer out of a .sfc
	sf-coact -q --merge --layers 2 "$t/whole.sfc" -o "$t/two.sfc"
	[ "$(slots "$t/two.sfc")" = "$(slots "$t/whole.sfc" | jq -c '[.[] | select(.[0] == 2)]')" ]
}

@test "--scores writes task scores; --merge-scores weights them by tokens" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$t/a.sfc" --scores "$t/a.json"
	sf-coact -q "$(T b.sft)" -o "$t/b.sfc" --scores "$t/b.json"
	[ "$(jq -r '.kind + " " + .task' "$t/a.json")" = "task kjv" ]
	sf-coact --merge-scores "$t/a.json" "$t/b.json" -o "$t/model.json"
	[ "$(jq -r '.kind' "$t/model.json")" = model ]
	local ta tb
	ta=$(jq '.slots[3].tokens' "$t/a.json")
	tb=$(jq '.slots[3].tokens' "$t/b.json")
	[ "$(jq '.slots[3].tokens' "$t/model.json")" = $((ta + tb)) ]
	# entry 7 of layer 0 ffn_out: (sa * ta + sb * tb) / (ta + tb)
	run jq -n --slurpfile a "$t/a.json" --slurpfile b "$t/b.json" --slurpfile m "$t/model.json" \
		'($a[0].slots[3].scores[7] * $a[0].slots[3].tokens + $b[0].slots[3].scores[7] * $b[0].slots[3].tokens)
		 / ($a[0].slots[3].tokens + $b[0].slots[3].tokens) - $m[0].slots[3].scores[7] | fabs < 1e-12'
	[ "$output" = true ]
}

@test "a truncated trace is one error line and no output" {
	local t=$BATS_TEST_TMPDIR
	head -c 5000 "$(T a.sft)" >"$t/cut.sft"
	run --separate-stderr sf-coact -q "$t/cut.sft" -o "$t/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/cut.sft: truncated at byte 5000: block 0 needs "[0-9]+" bytes, "[0-9]+" left"$ ]]
	[ ! -e "$t/x.sfc" ]
}

@test "a corrupted trace is one error line" {
	local t=$BATS_TEST_TMPDIR
	cp "$(T a.sft)" "$t/bad.sft"
	printf '\377' | dd of="$t/bad.sft" bs=1 seek=3000 conv=notrunc status=none
	run --separate-stderr sf-coact -q "$t/bad.sft" -o "$t/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/bad.sft: block 0: checksum 0x"[0-9a-f]{8}", the block says 0x"[0-9a-f]{8}$ ]]
	[ ! -e "$t/x.sfc" ]
}

@test "something that is not a trace is one error line" {
	run --separate-stderr sf-coact -q "$MODEL/config.json" -o "$BATS_TEST_TMPDIR/x.sfc"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $MODEL/config.json: not a sparseflash trace (bad magic)" ]
}

@test "traces of different models are refused, naming both" {
	run --separate-stderr sf-coact -q "$(T a.sft)" "$(T other.sft)" -o "$BATS_TEST_TMPDIR/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $(T other.sft): trace of another model than $(T a.sft): shape fingerprint "[0-9a-f]{16}", expected "[0-9a-f]{16}$ ]]
	[ ! -e "$BATS_TEST_TMPDIR/x.sfc" ]
}

@test ".sfc files of different models are refused, naming both" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$t/a.sfc"
	sf-coact -q "$(T other.sft)" -o "$t/o.sfc"
	run --separate-stderr sf-coact -q --merge "$t/a.sfc" "$t/o.sfc" -o "$t/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/o.sfc: counts of another model than $t/a.sfc: shape fingerprint "[0-9a-f]{16}", expected "[0-9a-f]{16}$ ]]
	[ ! -e "$t/x.sfc" ]
}

@test "a truncated or corrupted .sfc is one error line" {
	local t=$BATS_TEST_TMPDIR size
	sf-coact -q "$(T a.sft)" -o "$t/a.sfc"
	size=$(stat -c %s "$t/a.sfc")
	head -c $((size - 8)) "$t/a.sfc" >"$t/cut.sfc"
	run --separate-stderr sf-coact -q --info "$t/cut.sfc"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $t/cut.sfc: $((size - 8)) bytes: the header describes $size (truncated)" ]
	cp "$t/a.sfc" "$t/bad.sfc"
	printf '\001' | dd of="$t/bad.sfc" bs=1 seek=$((size - 100)) conv=notrunc status=none
	run --separate-stderr sf-coact -q --merge "$t/bad.sfc" -o "$t/x.sfc"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/bad.sfc: layer 3 ffn_out: checksum 0x" ]]
	[ ! -e "$t/x.sfc" ]
}

@test "one and two threads give the same statistics" {
	local t=$BATS_TEST_TMPDIR
	sf-coact -q -t 1 "$(T a.sft)" "$(T b.sft)" -o "$t/1.sfc"
	sf-coact -q -t 2 "$(T a.sft)" "$(T b.sft)" -o "$t/2.sfc"
	cmp "$t/1.sfc" "$t/2.sfc"
}

# --select-neurons, recomputed in jq: per layer's ffn_out, the top D of the
# task scores (ties to the lower index), then the model scores' best not
# yet chosen up to G; the result ascending. task or model may be null.
expect_neurons() { # task.json|null model.json|null gamma delta
	jq -n -c --argjson g "$3" --argjson d "$4" \
		--slurpfile t "${1/#null//dev/null}" --slurpfile m "${2/#null//dev/null}" '
	def order($s): [$s | to_entries | sort_by(-.value, .key) | .[].key];
	def cnt($x; $n): ($x * $n + 0.5 | floor);
	def ffn($f): [$f[0].slots[]? | select(.group == "ffn_out")];
	(ffn($t) + ffn($m) | map(.layer) | unique) as $layers
	| [$layers[] as $l
	   | ([ffn($t)[] | select(.layer == $l)][0]) as $ts
	   | ([ffn($m)[] | select(.layer == $l)][0]) as $ms
	   | (($ts // $ms).entries) as $n
	   | cnt($g; $n) as $want
	   | (if $ts and $ms then [cnt($d; $n), $want] | min else $want end) as $first
	   | (if $ts then order($ts.scores)[0:$first] else [] end) as $a
	   | (if $ms then [order($ms.scores)[] | select(. as $x | $a | index([$x]) | not)]
	      else [] end) as $b
	   | {layer: $l, neurons: ($a + $b)[0:$want] | sort}]'
}

@test "--select-neurons keeps the task's top delta, then model scores up to gamma" {
	local t=$BATS_TEST_TMPDIR
	sf-coact --select-neurons --gamma 0.7 --delta 0.4 --task "$(T kjv.json)" "$(T model.json)" \
		-o "$t/n.json"
	[ "$(jq -c .layers "$t/n.json")" = "$(expect_neurons "$(T kjv.json)" "$(T model.json)" 0.7 0.4)" ]
	# 4 layers of round(0.7 x 384) = 269 neurons, unique and ascending
	[ "$(jq -c '[.layers[] | .neurons | length]' "$t/n.json")" = "[269,269,269,269]" ]
	[ "$(jq '[.layers[] | .neurons == (.neurons | unique)] | all' "$t/n.json")" = true ]
	[ "$(jq -r '.format + " " + .fingerprint' "$t/n.json")" = "sparseflash-neurons $(jq -r .fingerprint "$(T kjv.json)")" ]
	[ "$(jq -c .source.options "$t/n.json")" = "{\"gamma\":0.7,\"delta\":0.4,\"task\":\"$(T kjv.json)\",\"model\":\"$(T model.json)\"}" ]
	# another delta changes which neurons, not how many
	sf-coact --select-neurons --gamma 0.7 --delta 0.1 --task "$(T kjv.json)" "$(T model.json)" \
		-o "$t/n1.json"
	[ "$(jq -c .layers "$t/n1.json")" = "$(expect_neurons "$(T kjv.json)" "$(T model.json)" 0.7 0.1)" ]
	! cmp -s "$t/n.json" "$t/n1.json"
}

@test "--select-neurons with one file: it alone fills up to gamma" {
	local t=$BATS_TEST_TMPDIR
	sf-coact --select-neurons --gamma 0.5 --task "$(T man.json)" -o "$t/task.json"
	[ "$(jq -c .layers "$t/task.json")" = "$(expect_neurons "$(T man.json)" null 0.5 0)" ]
	# the model file from standard input, the default gamma (0.7)
	sf-coact --select-neurons - <"$(T model.json)" >"$t/model.json"
	[ "$(jq -c .layers "$t/model.json")" = "$(expect_neurons null "$(T model.json)" 0.7 0)" ]
}

@test "sf-pack --keep takes the neurons file" {
	local t=$BATS_TEST_TMPDIR
	sf-coact --select-neurons --gamma 0.25 --task "$(T kjv.json)" "$(T model.json)" -o "$t/n.json"
	sf-pack -m "$MODEL" --keep "$t/n.json" -o "$t/kept.sfimg"
	# round(0.25 x 384) = 96 of each of the 4 layers
	[ "$(sf-pack --info "$t/kept.sfimg" | jq .neurons.kept)" = 384 ]
}

@test "--select-neurons refuses scores of the wrong kind, without output" {
	local t=$BATS_TEST_TMPDIR
	run --separate-stderr sf-coact --select-neurons --task "$(T model.json)" -o "$t/n.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $(T model.json): kind is \"model\": expected task-specific scores (of one task)" ]
	run --separate-stderr sf-coact --select-neurons "$(T kjv.json)" -o "$t/n.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $(T kjv.json): kind is \"task\": expected model-specific scores (sf-coact --merge-scores)" ]
	[ ! -e "$t/n.json" ]
}

@test "--select-neurons refuses scores of two models, naming both" {
	local t=$BATS_TEST_TMPDIR
	sf-coact --merge-scores "$(T other.json)" -o "$t/om.json"
	run --separate-stderr sf-coact --select-neurons --task "$(T kjv.json)" "$t/om.json" -o "$t/n.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $t/om.json: scores of another model than $(T kjv.json): shape fingerprint $(jq -r .shape_fingerprint "$t/om.json"), expected $(jq -r .shape_fingerprint "$(T kjv.json)")" ]
	[ ! -e "$t/n.json" ]
}

@test "damaged score files are one error line, exit 1, no output" {
	local t=$BATS_TEST_TMPDIR s
	s=$(stat -c %s "$(T kjv.json)")
	head -c $((s / 2)) "$(T kjv.json)" >"$t/cut.json"
	run --separate-stderr sf-coact --select-neurons --task "$t/cut.json" -o "$t/n.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/cut.json: line 1: " ]]
	[ "${#stderr_lines[@]}" -eq 1 ]
	# a score array one short
	jq -c '.slots[3].scores |= .[1:]' "$(T kjv.json)" >"$t/short.json"
	run --separate-stderr sf-coact --select-neurons --task "$t/short.json" -o "$t/n.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $t/short.json: layer 0 ffn_out: \"scores\" has 383 values, expected 384" ]
	# NaN is not JSON; a negative score is not a sum of |value|
	sed 's/"scores":\[[^,]*/"scores":[NaN/' "$(T kjv.json)" >"$t/nan.json"
	run --separate-stderr sf-coact --select-neurons --task "$t/nan.json" -o "$t/n.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" =~ ^"sf-coact: $t/nan.json: line 1: invalid token" ]]
	jq -c '.slots[3].scores[5] = -0.5' "$(T kjv.json)" >"$t/neg.json"
	run --separate-stderr sf-coact --select-neurons --task "$t/neg.json" -o "$t/n.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $t/neg.json: layer 0 ffn_out: scores[5] is -0.5: expected 0..inf" ]
	# model scores whose layers disagree with the task's on the neurons
	jq -c '.slots[3] |= (.entries = 383 | .scores |= .[1:] | .frequency |= .[1:])' \
		"$(T model.json)" >"$t/size.json"
	run --separate-stderr sf-coact --select-neurons --task "$(T kjv.json)" "$t/size.json" -o "$t/n.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $t/size.json: layer 0 ffn_out has 383 entries, $(T kjv.json) 384" ]
	run --separate-stderr sf-coact --select-neurons --task "$MODEL/config.json" -o "$t/n.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $MODEL/config.json: \"format\" is not \"sparseflash-scores\"" ]
	[ ! -e "$t/n.json" ]
}

@test "--select-neurons usage errors exit 2" {
	run --separate-stderr sf-coact --select-neurons --gamma 0 --task "$(T kjv.json)"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-coact: --gamma: 0 keeps no neuron: expected more than 0" ]
	run --separate-stderr sf-coact --select-neurons --gamma 1.5 --task "$(T kjv.json)"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-coact: --gamma: 1.5 is out of range: expected 0..1" ]
	run --separate-stderr sf-coact --select-neurons
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-coact: --select-neurons needs --task scores, model scores, or both" ]
	run --separate-stderr sf-coact --task "$(T kjv.json)" "$(T a.sft)"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-coact: --task, --gamma and --delta go with --select-neurons" ]
	run --separate-stderr sf-coact --select-neurons --task - -
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-coact: standard input (\"-\") can be read only once" ]
}

@test "--merge-scores checks its inputs as the reader does, without output" {
	local t=$BATS_TEST_TMPDIR
	jq -c '.slots[3].frequency[2] = 2' "$(T man.json)" >"$t/freq.json"
	run --separate-stderr sf-coact --merge-scores "$(T kjv.json)" "$t/freq.json" -o "$t/m.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $t/freq.json: layer 0 ffn_out: frequency[2] is 2: expected 0..1" ]
	run --separate-stderr sf-coact --merge-scores "$(T kjv.json)" "$(T other.json)" -o "$t/m.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $(T other.json): scores of another model than $(T kjv.json): shape fingerprint $(jq -r .shape_fingerprint "$(T other.json)"), expected $(jq -r .shape_fingerprint "$(T kjv.json)")" ]
	[ ! -e "$t/m.json" ]
}

@test "a write error on standard output is reported once" {
	stdout_full_once "sf-coact: (stdout): write error: No space left on device" \
		sf-coact -q "$(T a.sft)"
}

@test "no trace given at a terminal: a line says standard input is read" {
	printf '\004' | timeout 60 script -qec "sf-coact -o /dev/null" /dev/null >"$BATS_TEST_TMPDIR/tty" || true
	grep -q "sf-coact: no trace given: reading one from standard input (sf-profile ... | sf-coact)" "$BATS_TEST_TMPDIR/tty"
}

@test "a mixture's experts: counts, pairs and each step from the layer before equal a recount of the trace; --info's picks and step; --layers splits merge to the whole" {
	local python=${SF_PYTHON:-python3}
	command -v "$python" >/dev/null || skip "no $python: the recount is in Python"
	sf-coact -q "$(T mix.sft)" -o "$(T mix.sfc)"
	run "$python" "$SF_ROOT/tests/oracle/recount.py" "$(T mix.sft)" "$(T mix.sfc)"
	[ "$status" -eq 0 ]
	[ "$output" = ok ]
	run sf-coact -q --info "$(T mix.sfc)"
	echo "$output" | jq -e '[.slots[] | select(.group == "experts")] |
		length == 3 and (.[0] | has("step") | not) and
		([.[1:][] | .step.from == .layer - 1 and .step.successors == 2 and .step.chance == 0.5 and
		  .step.steps == 4 * .tokens and .step.covered >= 0.5 and .step.covered <= 1] | all) and
		([.[] | (.picks | add) == 2 * .tokens] | all)'
	sf-coact -q --layers 0-1 "$(T mix.sft)" -o "$BATS_TEST_TMPDIR/lo.sfc"
	sf-coact -q --layers 2 "$(T mix.sft)" -o "$BATS_TEST_TMPDIR/hi.sfc"
	sf-coact -q --merge "$BATS_TEST_TMPDIR/hi.sfc" "$BATS_TEST_TMPDIR/lo.sfc" \
		-o "$BATS_TEST_TMPDIR/m.sfc"
	[ "$(slots "$BATS_TEST_TMPDIR/m.sfc")" = "$(slots "$(T mix.sfc)")" ]
}

@test "experts counted without the step from the layer before do not merge with those counted with it" {
	sf-profile -q -m "$(T mix)" --density 0.1 --layers 2 "$(T a.txt)" -o "$BATS_TEST_TMPDIR/l2.sft"
	sf-coact -q "$BATS_TEST_TMPDIR/l2.sft" -o "$BATS_TEST_TMPDIR/l2.sfc"
	sf-coact -q --layers 2 "$(T mix.sft)" -o "$BATS_TEST_TMPDIR/hi.sfc"
	run --separate-stderr sf-coact --merge "$BATS_TEST_TMPDIR/hi.sfc" "$BATS_TEST_TMPDIR/l2.sfc" \
		-o "$BATS_TEST_TMPDIR/m.sfc"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $BATS_TEST_TMPDIR/l2.sfc: layer 2 experts: does not count the step from layer 1, $BATS_TEST_TMPDIR/hi.sfc's does" ]
	[ ! -e "$BATS_TEST_TMPDIR/m.sfc" ]
}

# A dense model's version 3 trace and .sfc are its version 2 ones but for
# the version word and the header's "version" (sf-formats(5)).
@test "version 2 traces and .sfc files are still read to the same statistics; versions 1 and 4 refused by name" {
	local v d=$BATS_TEST_TMPDIR
	sf-coact -q "$(T a.sft)" -o "$d/a.sfc"
	for v in 1 2 4; do
		cp "$(T a.sft)" "$d/v$v.sft"
		cp "$d/a.sfc" "$d/v$v.sfc"
		sed -i "0,/\"version\":3,/s//\"version\":$v,/" "$d/v$v.sft" "$d/v$v.sfc"
		printf "\\x0$v" | dd of="$d/v$v.sft" bs=1 seek=8 conv=notrunc status=none
		printf "\\x0$v" | dd of="$d/v$v.sfc" bs=1 seek=8 conv=notrunc status=none
	done
	sf-coact -q "$d/v2.sft" -o "$d/from2.sfc"
	[ "$(slots "$d/from2.sfc")" = "$(slots "$d/a.sfc")" ]
	sf-coact -q --merge "$d/v2.sfc" -o "$d/merged2.sfc"
	[ "$(slots "$d/merged2.sfc")" = "$(slots "$d/a.sfc")" ]
	run --separate-stderr sf-coact -q "$d/v1.sft" -o "$d/x.sfc"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $d/v1.sft: trace version 1, expected 3: made before fingerprints covered the weights; make it again" ]
	run --separate-stderr sf-coact -q --info "$d/v4.sfc"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-coact: $d/v4.sfc: coact file version 4, expected 3" ]
}
