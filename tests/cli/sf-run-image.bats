#!/usr/bin/env bats
# sf-run IMAGE: the sparse decoder on images of the embedded mix4-1m
# (identity and coact placements, scalar codes, calibrated tiers): budget 1
# is the dense decoder; below it the output equals --simulate whatever the
# cache, collapse, queue depth and threads; faults are one clear line and
# exit 1. SelectInfer's pinned set, --keep images and selective
# computation, --free-riders, and the peak resident set under --ram on
# mix4-5m. Images live under $SF_TMP (disk: O_DIRECT works there).

load helpers

setup_file() {
	file_scratch sf-run-image
	export CORPUS=$SF_ROOT/man/sf-run.1
	"$SF_BIN/sf-profile" --model "$MODEL" --task man --max-tokens 150 -q "$CORPUS" -o "$D/p.sft"
	"$SF_BIN/sf-coact" -q "$D/p.sft" --scores "$D/task.json" -o "$D/p.sfc"
	# SelectInfer's model-specific scores: the task merged with another one
	"$SF_BIN/sf-profile" --model "$MODEL" --task pack --max-tokens 150 -q "$SF_ROOT/man/sf-pack.1" |
		"$SF_BIN/sf-coact" -q --scores "$D/other.json" -o /dev/null
	"$SF_BIN/sf-coact" --merge-scores "$D/task.json" "$D/other.json" -o "$D/model.json"
	"$SF_BIN/sf-place" -q --method coact "$D/p.sfc" -o "$D/coact.json"
	"$SF_BIN/sf-encode" --model "$MODEL" --method scalar -t 2 -o "$D/codes.sfq"
	"$SF_BIN/sf-encode" --model "$MODEL" --calibrate --codes "$D/codes.sfq" -t 2 \
		--corpus "$CORPUS" --budgets 0.5 --calib-tokens 8 --window 8 -o "$D/calib.json"
	"$SF_BIN/sf-pack" --model "$MODEL" -o "$D/id.sfimg"
	"$SF_BIN/sf-pack" --model "$MODEL" --placement "$D/coact.json" --codes "$D/codes.sfq" \
		--calib "$D/calib.json" -o "$D/coact.sfimg"
	export PROMPT="In the beginning"
	"$SF_BIN/sf-run" --model "$MODEL" -p "$PROMPT" -n 24 --temp 0 -q > "$D/dense.txt"
	probe_direct "$D/id.sfimg"
	probe_uring "$D/id.sfimg"
}

teardown_file() {
	rm -rf "$D"
}

gen() { sf-run -p "$PROMPT" -n 24 --temp 0 -q "$@"; }

@test "--help shows the IMAGE usage and the sparse options" {
	run sf-run --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"sf-run [options] IMAGE"* ]]
	[[ "$output" == *"--budget B"* ]]
	[[ "$output" == *"--simulate"* ]]
}

@test "usage errors exit 2 with one line" {
	run sf-run --model "$MODEL" --budget 0.5 -p x
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: sparse decoding options need an IMAGE, not --model" ]
	run sf-run --model "$MODEL" -p x "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --model MODEL and IMAGE cannot be combined" ]
	run sf-run --budget 0.5 --density 0.3 "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --budget, --density and --k-top cannot be combined" ]
	run sf-run --k-mid 0.2 "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --k-mid needs --k-top" ]
	run sf-run --k-top 0.7 --k-mid 0.5 "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --k-top 0.7 and --k-mid 0.5: more than every entry" ]
	run sf-run --cache-policy fifo "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --cache-policy: 'fifo': expected s3fifo, lru or none" ]
	run sf-run --collapse some "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --collapse: 'some' is not a whole number" ]
	run sf-run --cache-ratio 0.1 --cache-policy none "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --cache-ratio cannot be combined with --cache-policy none" ]
}

@test "budget 1 gives the dense decoder's tokens: identity and coact, cache on and off" {
	need_direct
	run gen "$D/id.sfimg"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/dense.txt")" ]
	run gen --cache-ratio 0.3 "$D/id.sfimg"
	[ "$output" = "$(cat "$D/dense.txt")" ]
	run gen "$D/coact.sfimg"
	[ "$output" = "$(cat "$D/dense.txt")" ]
	run gen --budget 1 --cache-ratio 0.3 --cache-policy lru "$D/coact.sfimg"
	[ "$output" = "$(cat "$D/dense.txt")" ]
}

@test "mix4-5m at budget 1 gives the dense decoder's tokens: identity and coact" {
	need_shared
	need_direct
	local m=$SF_SHARED/models/mix4-5m
	sf-profile --model "$m" --max-tokens 40 -q "$CORPUS" | sf-coact -q - -o "$D/p5.sfc"
	sf-place -q --method coact "$D/p5.sfc" -o "$D/coact5.json"
	sf-pack --model "$m" -o "$D/id5.sfimg"
	sf-pack --model "$m" --placement "$D/coact5.json" -o "$D/coact5.sfimg"
	sf-run --model "$m" -p "$PROMPT" -n 24 --temp 0 -q > "$D/dense5.txt"
	run gen "$D/id5.sfimg"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/dense5.txt")" ]
	run gen --cache-ratio 0.2 "$D/coact5.sfimg"
	[ "$output" = "$(cat "$D/dense5.txt")" ]
	run gen --prefetch 3 --read-size 8192 "$D/coact5.sfimg"
	[ "$output" = "$(cat "$D/dense5.txt")" ]
	SF_FAULT=mispredict run gen --prefetch 2 --prefetch-predict all "$D/coact5.sfimg"
	[ "$output" = "$(cat "$D/dense5.txt")" ]
	local want
	want=$(gen --density 0.4 --simulate "$D/coact5.sfimg")
	run gen --density 0.4 --prefetch 2 --prefetch-predict all --cache-ratio 0.1 "$D/coact5.sfimg"
	[ "$output" = "$want" ]
	SF_FAULT=mispredict run gen --density 0.4 --prefetch 1 --read-size 4096 "$D/coact5.sfimg"
	[ "$output" = "$want" ]
	rm -f "$D"/*5.sfimg
}

@test "below budget 1 the tokens equal --simulate, whatever cache, collapse, qd and threads" {
	need_direct
	local want
	want=$(gen --budget 0.5 --simulate "$D/coact.sfimg")
	[ -n "$want" ]
	[ "$want" != "$(cat "$D/dense.txt")" ]
	run gen --budget 0.5 "$D/coact.sfimg"
	[ "$output" = "$want" ]
	run gen --budget 0.5 --cache-ratio 0.3 --cache-policy lru --collapse 0 --qd 1 -t 1 "$D/coact.sfimg"
	[ "$output" = "$want" ]
	run gen --budget 0.5 --cache-ratio 0.2 --seg-admit 0.1 --collapse 16 --qd 3 -t 2 "$D/coact.sfimg"
	[ "$output" = "$want" ]
	# a --ram budget with 1 MiB left for the cache (the process's own
	# share is larger under the sanitizers)
	local need
	need=$(sf-run -p x -n 1 --budget 0.5 --ram 1M "$D/coact.sfimg" 2>&1 |
		sed -E 's/.*: ([0-9]+) bytes needed.*/\1/')
	run gen --budget 0.5 --ram $((need + 1048576)) --no-direct "$D/coact.sfimg"
	[ "$output" = "$want" ]
	want=$(gen --density 0.4 --simulate "$D/coact.sfimg")
	run gen --density 0.4 --cache-ratio 0.3 "$D/coact.sfimg"
	[ "$output" = "$want" ]
	want=$(gen --k-top 0.2 --k-mid 0.3 --simulate "$D/coact.sfimg")
	run gen --k-top 0.2 --k-mid 0.3 --collapse 2 "$D/coact.sfimg"
	[ "$output" = "$want" ]
}

@test "--prefetch, --prefetch-predict, --read-size: the tokens equal --simulate, predictions forced wrong too" {
	need_direct
	local want cfg
	for cfg in "--budget 1" "--budget 0.5" "--density 0.4" "--k-top 0.2 --k-mid 0.3"; do
		# shellcheck disable=SC2086
		want=$(gen $cfg --simulate "$D/coact.sfimg")
		[ -n "$want" ]
		for opt in "--prefetch 0" "--prefetch 1 --prefetch-predict none" \
			"--prefetch 2 --prefetch-predict residual --read-size 4096 --qd 2" \
			"--prefetch 3 --prefetch-predict all -t 1" \
			"--prefetch 1 --prefetch-predict all --cache-ratio 0.3 --cache-policy lru -t 2" \
			"--prefetch 2 --read-size 1048576 --collapse 0 --cache-ratio 0.2"; do
			# shellcheck disable=SC2086
			run gen $cfg $opt "$D/coact.sfimg"
			[ "$status" -eq 0 ]
			[ "$output" = "$want" ] || { echo "$cfg $opt: $output"; false; }
			# shellcheck disable=SC2086
			SF_FAULT=mispredict run gen $cfg $opt "$D/coact.sfimg"
			[ "$output" = "$want" ] || { echo "mispredict $cfg $opt: $output"; false; }
		done
	done
}

@test "--prefetch reads ahead: every page at budget 1, the predicted ones below it, counted in --stats" {
	need_direct
	local s
	s=$(sf-run -p "$PROMPT" -n 8 --temp 0 --stats - --prefetch 1 "$D/coact.sfimg" 2>/dev/null)
	# after the first group every page is asked for before its group runs
	jq -e '[.groups[] | .prefetch_recall] | min > 0.9' <<< "$s"
	jq -e '.reads.prefetch == 1 and .reads.read_size == 262144' <<< "$s"
	s=$(sf-run -p "$PROMPT" -n 8 --temp 0 --stats - --budget 0.5 --prefetch-predict all "$D/coact.sfimg" 2>/dev/null)
	jq -e '.groups.attn_in.prefetch_bytes_per_token > 0 and .groups.ffn_out.prefetch_bytes_per_token > 0' <<< "$s"
	jq -e '[.groups[] | .prefetch_recall, .prefetch_overfetch] | all(. >= 0 and . <= 1)' <<< "$s"
	s=$(sf-run -p "$PROMPT" -n 8 --temp 0 --stats - --budget 0.5 --prefetch 0 "$D/coact.sfimg" 2>/dev/null)
	jq -e '[.groups[] | .prefetch_bytes_per_token] | add == 0' <<< "$s"
	# one request never exceeds --read-size
	s=$(sf-run -p "$PROMPT" -n 4 --temp 0 --stats - --read-size 8192 "$D/coact.sfimg" 2>/dev/null)
	jq -e '.reads.bytes_per_request <= 8192' <<< "$s"
}

@test "--head-on-flash: the embedding rows and the head read from flash give the dense tokens and perplexity, in less RAM" {
	need_direct
	run gen --head-on-flash "$D/id.sfimg"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/dense.txt")" ]
	local want
	want=$(gen --density 0.4 --simulate "$D/coact.sfimg")
	run gen --density 0.4 --head-on-flash --read-size 4096 -t 2 "$D/coact.sfimg"
	[ "$output" = "$want" ]
	local a b
	a=$(sf-run --ppl "$CORPUS" --max-tokens 100 --window 50 --simulate "$D/id.sfimg" | jq .ppl)
	b=$(sf-run --ppl "$CORPUS" --max-tokens 100 --window 50 --head-on-flash "$D/id.sfimg" | jq .ppl)
	[ "$a" = "$b" ]
	# mix4-1m ties the head to the embedding: held in RAM unless both are on flash
	local ram flash
	ram=$(sf-run -p x -n 1 --stats - "$D/id.sfimg" 2>/dev/null | jq .memory.resident)
	flash=$(sf-run -p x -n 1 --stats - --head-on-flash "$D/id.sfimg" 2>/dev/null | jq .memory.resident)
	local vocab dim
	vocab=$(jq .vocab_size "$MODEL/config.json")
	dim=$(jq .hidden_size "$MODEL/config.json")
	(( ram - flash >= vocab * dim * 2 - 8192 ))
	# a failed read of the head is one line
	SF_FAULT=eio=1 run --separate-stderr sf-run -p "$PROMPT" -n 2 --temp 0 --head-on-flash "$D/id.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ Input/output\ error$ ]]
	[ -z "$output" ]
}

@test "a read error in a read ahead is reported like any other" {
	need_direct
	# at budget 1 with --prefetch every group's reads after the first
	# group's are read ahead: with 4 KiB reads, the 100th is one of them
	SF_FAULT=eio=100 run --separate-stderr sf-run -p "$PROMPT" -n 4 --temp 0 --read-size 4096 \
		--prefetch 2 "$D/coact.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ $D/coact.sfimg:\ read\ of\ [0-9]+\ bytes\ at\ offset\ [0-9]+:\ Input/output\ error$ ]]
	[ -z "$output" ]
}

@test "--read-size and --prefetch-predict refuse bad values" {
	run sf-run --read-size 6000 -p x "$D/coact.sfimg"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --read-size: 6000: not a multiple of 4096" ]
	run sf-run --prefetch-predict magic -p x "$D/coact.sfimg"
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --prefetch-predict: 'magic': expected none, residual or all" ]
}

@test "q8 and q4 images: -v names the dtype; budget 1, two tiers, TEAL, -b and q4-calibrated tiers equal --simulate; budget 1 reads 18/64 of BF16's bytes" {
	need_direct
	sf-pack --model "$MODEL" --placement "$D/coact.json" --codes "$D/codes.sfq" --dtype q8 -o "$D/q8.sfimg"
	sf-pack --model "$MODEL" --placement "$D/coact.json" --codes "$D/codes.sfq" --dtype q4 -o "$D/q4.sfimg"
	run --separate-stderr sf-run -p "$PROMPT" -n 1 --temp 0 -v "$D/q4.sfimg"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"sf-run: top tier Q4 (blocks of 32 rows, an f16 scale each); budgets in its bytes"* ]]
	local q long want
	long=$(head -c 600 "$SF_ROOT/README.md" | tr '\n' ' ')
	for q in q8 q4; do
		want=$(gen --simulate "$D/$q.sfimg")
		[ -n "$want" ]
		run gen --cache-ratio 0.3 "$D/$q.sfimg"
		[ "$output" = "$want" ]
		want=$(gen --k-top 0.3 --k-mid 0.3 --simulate "$D/$q.sfimg")
		run gen --k-top 0.3 --k-mid 0.3 --cache-ratio 0.2 -t 1 "$D/$q.sfimg"
		[ "$output" = "$want" ]
		want=$(gen --density 0.4 -b 1 -p "$long" --simulate "$D/$q.sfimg")
		run gen --density 0.4 -b 7 -p "$long" "$D/$q.sfimg"
		[ "$output" = "$want" ]
	done
	local bf q4
	bf=$(gen --bench -n 8 "$D/coact.sfimg" | jq .bytes_needed_per_token)
	q4=$(gen --bench -n 8 "$D/q4.sfimg" | jq .bytes_needed_per_token)
	[ "$(gen --bench -n 1 "$D/q4.sfimg" | jq -r .top_dtype)" = Q4 ]
	jq -ne "$q4 / $bf > 0.26 and $q4 / $bf < 0.3"
	# tiers calibrated against the q4 top tier: sf-run's budget in q4
	# bytes is the realised one; equal to --simulate
	sf-encode --model "$MODEL" --calibrate --codes "$D/codes.sfq" --dtype q4 -t 2 -q \
		--corpus "$CORPUS" --budgets 0.5 --calib-tokens 8 --window 8 -o "$D/calq4.json"
	sf-pack --model "$MODEL" --placement "$D/coact.json" --codes "$D/codes.sfq" \
		--calib "$D/calq4.json" --dtype q4 -o "$D/q4c.sfimg"
	want=$(gen --budget 0.5 --simulate "$D/q4c.sfimg")
	run gen --budget 0.5 --cache-ratio 0.2 "$D/q4c.sfimg"
	[ "$output" = "$want" ]
	local realised budget
	realised=$(sf-pack --info "$D/q4c.sfimg" | jq '.tiers.realised[0]')
	budget=$(gen --budget 0.5 --bench "$D/q4c.sfimg" | jq .budget)
	jq -ne "($budget - $realised) | fabs < 1e-9"
	rm -f "$D/q8.sfimg" "$D/q4.sfimg" "$D/q4c.sfimg"
}

@test "a q4 image's Q6 head held in RAM is tiled where AVX-512 runs (-v: Q6x16): the floats of its rows, read from flash or by AVX2's kernels" {
	need_direct
	local m
	sf-pack --model "$MODEL" --dtype q4 -o "$D/q4h.sfimg"
	[ "$(sf-pack --info "$D/q4h.sfimg" | jq -r .token_embedding.dtype)" = Q6 ]
	m=$(sf-run -p x -n 1 -v "$D/q4h.sfimg" 2>&1 >/dev/null | grep "; kernels ")
	if [[ "$m" == *"kernels avx512"* ]]; then
		[[ "$m" == *", Q6x16, "* ]]
		# tiled after the deferred read of --ram too
		sf-run -p x -n 1 -v --ram 1G "$D/q4h.sfimg" 2>&1 >/dev/null | grep -q ", Q6x16, "
		sf-run -p x -n 1 -v "$D/q4h.sfimg" --head-on-flash 2>&1 >/dev/null | grep -q ", Q6, "
		SF_ISA=avx2 sf-run -p x -n 1 -v "$D/q4h.sfimg" 2>&1 >/dev/null | grep -q ", Q6, "
	else
		echo "# no AVX-512 here: the head stays in rows" >&3
		[[ "$m" == *", Q6, "* ]]
	fi
	# a pass of tokens, a token at a time, and the deferred read
	local want
	want=$(sf-run --ppl "$CORPUS" --max-tokens 100 -q --head-on-flash "$D/q4h.sfimg" | jq .nll)
	[ "$(sf-run --ppl "$CORPUS" --max-tokens 100 -q "$D/q4h.sfimg" | jq .nll)" = "$want" ]
	[ "$(sf-run --ppl "$CORPUS" --max-tokens 100 -q -b 1 "$D/q4h.sfimg" | jq .nll)" = "$want" ]
	[ "$(sf-run --ppl "$CORPUS" --max-tokens 100 -q --ram 1G "$D/q4h.sfimg" | jq .nll)" = "$want" ]
	want=$(gen --head-on-flash "$D/q4h.sfimg")
	[ -n "$want" ]
	[ "$(gen "$D/q4h.sfimg")" = "$want" ]
	[ "$(gen --simulate "$D/q4h.sfimg")" = "$want" ]
	rm -f "$D/q4h.sfimg"
}

@test "below budget 1 the perplexity equals --simulate" {
	need_direct
	local a b
	a=$(sf-run --ppl "$CORPUS" --max-tokens 150 --window 64 --budget 0.5 --simulate "$D/coact.sfimg" | jq .ppl)
	b=$(sf-run --ppl "$CORPUS" --max-tokens 150 --window 64 --budget 0.5 --cache-ratio 0.3 \
		--collapse 0 -t 1 "$D/coact.sfimg" | jq .ppl)
	[ "$a" = "$b" ]
	d=$(sf-run --model "$MODEL" --ppl "$CORPUS" --max-tokens 150 --window 64 | jq .ppl)
	[ "$a" != "$d" ]
}

@test "--bench prints figures that jq reads; bytes counted equal the ring's" {
	need_direct
	need_uring
	run --separate-stderr sf-run -p "$PROMPT" -n 8 --temp 0 --bench --budget 0.5 \
		--cache-ratio 0.2 "$D/coact.sfimg"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.tokens == 15 and .decode_tokens == 8 and .backend == "io_uring"'
	echo "$output" | jq -e '.bytes_moved == .uring.bytes and .requests == .uring.requests'
	echo "$output" | jq -e '.latency_seconds.p50 > 0 and .latency_seconds.p99 >= .latency_seconds.p50'
	echo "$output" | jq -e '.budget > 0.4 and .budget < 0.6 and (.groups | length) == 4'
	echo "$output" | jq -e '.cache.lookups > 0 and .bytes_moved_over_needed >= 1'
	echo "$output" | jq -e '[.read_length_histogram[]] | add > 0'
	echo "$output" | jq -e '.collapse.setting | test("without device figures")'
	sf-run --ppl "$CORPUS" --max-tokens 100 --window 32 --density 0.5 --stats "$D/s.json" \
		"$D/coact.sfimg" > "$D/ppl.json"
	jq -e '.ppl > 1' "$D/ppl.json"
	jq -e '.mode == "ppl" and .tokens == 99 and .bytes_moved > 0' "$D/s.json"
}

@test "-v says how collapse auto decides: no probe data, or the device figures" {
	need_direct
	run --separate-stderr sf-run -p x -n 1 -q -v "$D/id.sfimg"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"collapse auto without device figures (sf-run --probe-device): 32768 bytes"* ]]
	[[ "$stderr" == *"memory: "*" bytes: process "*", resident "*", pinned "* ]]
	run --separate-stderr sf-run -p x -n 1 -q -v --device-peak 2000000000 "$D/id.sfimg"
	[[ "$stderr" == *"collapse auto: 32768 bytes, off while above 80% of the device peak 2000 MB/s"* ]]
	# with the IOPS too, the gap is the bytes of one request's time: 2e9 /
	# 25,000 = 80,000, rounded down to 4 KiB
	run --separate-stderr sf-run -p x -n 1 -q -v --device-peak 2000000000 --device-iops 25000 \
		"$D/id.sfimg"
	[[ "$stderr" == *"collapse auto: 77824 bytes, off while above 80% of the device peak 2000 MB/s"* ]]
}

@test "a truncated image is a data error" {
	head -c 1000000 "$D/coact.sfimg" > "$D/trunc.sfimg"
	run --separate-stderr sf-run -p "$PROMPT" -n 4 --temp 0 "$D/trunc.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" == "sf-run: $D/trunc.sfimg: region '"*"' (bytes "*") extends past the end of the file (1000000 bytes): truncated?" ]]
	[ -z "$output" ]
}

@test "an injected read error: one line, exit 1, no result presented" {
	need_direct
	SF_FAULT=eio=3 run --separate-stderr sf-run --ppl "$CORPUS" --max-tokens 100 \
		--budget 0.5 "$D/coact.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ $D/coact.sfimg:\ read\ of\ [0-9]+\ bytes\ at\ offset\ [0-9]+:\ Input/output\ error$ ]]
	[ -z "$output" ]
	SF_FAULT=eio=3 run --separate-stderr sf-run -p "$PROMPT" -n 8 --temp 0 --bench "$D/coact.sfimg"
	[ "$status" -eq 1 ]
	[ -z "$output" ]
}

@test "short reads do not change the output" {
	need_direct
	local want
	want=$(gen --budget 0.5 -n 8 "$D/coact.sfimg")
	SF_FAULT=short=4096 run gen --budget 0.5 -n 8 "$D/coact.sfimg"
	[ "$status" -eq 0 ]
	[ "$output" = "$want" ]
}

@test "a RAM budget too small is refused with the figures and the least --ram to give" {
	run --separate-stderr sf-run -p x -n 1 --ram 1M --no-direct "$D/coact.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ $D/coact.sfimg:\ --ram\ 1048576:\ ([0-9]+)\ bytes\ needed:\ process\ [0-9]+,\ resident\ [0-9]+,\ state\ [0-9]+,\ KV\ cache\ [0-9]+\ \(128\ positions\),\ buffers\ [0-9]+,\ pinned\ 0,\ held\ groups\ 0,\ cache\ [0-9]+\;\ give\ --ram\ ([0-9]+)\ or\ more$ ]]
	[ "${BASH_REMATCH[2]}" -eq $((BASH_REMATCH[1] + 1048576)) ]	# room for the next run's process
}

@test "a budget the image was not calibrated for is refused, naming those it was" {
	run --separate-stderr sf-run -p x -n 1 --budget 0.3 "$D/coact.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $D/coact.sfimg: --budget 0.3: not calibrated; the image has 0.5" ]
	run --separate-stderr sf-run -p x -n 1 --budget 0.3 "$D/id.sfimg"
	[ "${stderr_lines[0]}" = "sf-run: $D/id.sfimg: --budget 0.3: the image has no tier sizes (sf-pack --calib)" ]
	run --separate-stderr sf-run -p x -n 1 --k-top 0.3 --k-mid 0.2 "$D/id.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $D/id.sfimg: layer 0 attn_in: 26 middle-tier entries, but the image has no codes (sf-pack --codes)" ]
}

@test "collapse auto reads the device figures --probe-device stored, the page cache's never; a damaged file is refused" {
	need_direct
	need_uring
	local x=$D/xdg2 f
	f=$x/sparseflash/device-$(stat -c %Hd-%Ld "$D/id.sfimg").json
	mkdir -p "$x/sparseflash"
	echo '{"format": "sparseflash-device", "version": 1, "large": {"bytes_per_s": 3e9},
		"small": {"iops": 50000}}' > "$f"
	XDG_CACHE_HOME=$x run --separate-stderr sf-run -p x -n 1 -q -v "$D/id.sfimg"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"collapse auto: 57344 bytes, off while above 80% of the device peak 3000 MB/s"* ]]
	[[ "$stderr" == *"reads: io_uring (O_DIRECT)"* ]]
	# a page cache the probe timed faster (a host's memory serving the file
	# it had just written) does not turn O_DIRECT off
	echo '{"format": "sparseflash-device", "version": 1, "large": {"bytes_per_s": 3e9},
		"small": {"iops": 50000}, "buffered": {"bytes_per_s": 9.9e9}}' > "$f"
	XDG_CACHE_HOME=$x run --separate-stderr sf-run -p x -n 1 -q -v "$D/id.sfimg"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"reads: io_uring (O_DIRECT)"* ]]
	[[ "$stderr" == *"reads with O_DIRECT, though --probe-device timed the page cache at 9900 MB/s against 3000"* ]]
	# --device-iops wins over the stored figure
	XDG_CACHE_HOME=$x run --separate-stderr sf-run -p x -n 1 -q -v --device-iops 30000 "$D/id.sfimg"
	[[ "$stderr" == *"collapse auto: 98304 bytes,"* ]]
	# a file without the small-read figure is not ours (older than the gap in bytes)
	echo '{"format": "sparseflash-device", "version": 1, "large": {"bytes_per_s": 3e9}}' > "$f"
	XDG_CACHE_HOME=$x run --separate-stderr sf-run -p x -n 1 -q "$D/id.sfimg"
	[ "$status" -eq 1 ]
	echo '{"format": "other"}' > "$f"
	XDG_CACHE_HOME=$x run --separate-stderr sf-run -p x -n 1 -q "$D/id.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $f: not a device file of sf-run --probe-device (remove it and probe again)" ]
}

# mix4-1m: per layer round(0.7 n) of attn_in, attn_out, ffn_in (128 each)
# and ffn_out (384): 90 + 90 + 90 + 269, over 4 layers
PINNED_07=2156

@test "--pin: the best entries are read once and never evicted; the output does not change" {
	need_direct
	local want ppl
	want=$(gen --budget 0.5 --simulate "$D/coact.sfimg")
	run gen --budget 0.5 --pin "$D/task.json" --pin "$D/model.json" --cache-ratio 0.1 \
		--stats "$D/pin.json" "$D/coact.sfimg"
	[ "$status" -eq 0 ]
	[ "$output" = "$want" ]
	jq -e ".cache.pinned == $PINNED_07 and .cache.pin_hits > 0 and .cache.evictions > 0" "$D/pin.json"
	jq -e '.memory.pinned > 0 and .cache.hit_rate > 0.5' "$D/pin.json"
	# the model file alone, a smaller share, no cache beside it
	run gen --budget 0.5 --pin "$D/model.json" --pin-ratio 0.3 --cache-policy none \
		--stats "$D/pin.json" "$D/coact.sfimg"
	[ "$output" = "$want" ]
	jq -e '.cache.pinned == 4 * (38 + 38 + 38 + 115) and .cache.admissions == 0' "$D/pin.json"
	ppl=$(sf-run --ppl "$CORPUS" --max-tokens 150 --window 64 --density 0.4 --simulate "$D/coact.sfimg" | jq .ppl)
	run sf-run --ppl "$CORPUS" --max-tokens 150 --window 64 --density 0.4 --pin "$D/task.json" \
		--pin-ratio 0.5 --pin-delta 1 "$D/coact.sfimg"
	[ "$(echo "$output" | jq .ppl)" = "$ppl" ]
}

@test "--pin: errors name the file; the pinned set counts in --ram" {
	run --separate-stderr sf-run -p x -n 1 --pin "$D/task.json" --pin "$D/task.json" "$D/id.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $D/task.json: --pin: a second task score file ($D/task.json is one): expected one task and one model file" ]
	run --separate-stderr sf-run -p x -n 1 --pin "$D/task.json" --pin a --pin b "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: --pin: at most two files (task and model scores)" ]
	run --separate-stderr sf-run -p x -n 1 --pin-ratio 0.5 "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: --pin-ratio and --pin-delta need --pin" ]
	run --separate-stderr sf-run -p x -n 1 --pin "$D/nothing.json" "$D/id.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" == "sf-run: $D/nothing.json: "* ]]
	# what a run needs grows by the pinned set (1.2 MB), and it runs once
	# given that; the process's own resident set varies from run to run, by
	# a few pages and by up to 256 KiB under the sanitizers on a loaded
	# machine (more at times), so each run is given 2 MiB above its need
	local base pin pinned
	run --separate-stderr sf-run -p x -n 1 --ram 1M --cache-policy none "$D/id.sfimg"
	[ "$status" -eq 1 ]
	base=$(echo "${stderr_lines[0]}" | sed -E 's/.*: ([0-9]+) bytes needed.*/\1/')
	run --separate-stderr sf-run -p x -n 1 -q --ram $((base + 2097152)) --cache-policy none "$D/id.sfimg"
	[ "$status" -eq 0 ]
	run --separate-stderr sf-run -p x -n 1 --ram 1M --cache-policy none --pin "$D/model.json" "$D/id.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ $D/id.sfimg:\ --ram\ 1048576:\ ([0-9]+)\ bytes\ needed:\ .*,\ pinned\ ([1-9][0-9]*),\ held\ groups\ 0,\ cache\ [0-9]+\;\ give\ --ram\ [0-9]+\ or\ more$ ]]
	pin=${BASH_REMATCH[1]} pinned=${BASH_REMATCH[2]}
	echo "needed: $base, with the pinned set of $pinned bytes $pin"
	[ "$pinned" -gt 1000000 ]
	[ "$pin" -ge $((base + pinned - 524288)) ]
	run --separate-stderr sf-run -p x -n 1 -q --ram $((pin + 2097152)) --cache-policy none --pin "$D/model.json" "$D/id.sfimg"
	[ "$status" -eq 0 ]
}

@test "an image packed with --keep runs as it is: its neurons only, equal to --simulate" {
	need_direct
	local want
	sf-coact --select-neurons --gamma 0.6 --task "$D/task.json" "$D/model.json" -o "$D/keep.json"
	sf-pack --model "$MODEL" --placement "$D/coact.json" --keep "$D/keep.json" -o "$D/keep.sfimg"
	want=$(gen --simulate "$D/keep.sfimg")
	[ -n "$want" ]
	run gen --stats "$D/keep-stats.json" "$D/keep.sfimg"
	[ "$status" -eq 0 ]
	[ "$output" = "$want" ]
	# every kept neuron, no other: round(0.6 * 384) per layer
	jq -e '.groups.ffn_out.k_top == 230 and .groups.ffn_in.k_top == 128' "$D/keep-stats.json"
	jq -e '.groups.ffn_in.budget > 0.59 and .groups.ffn_in.budget < 0.61' "$D/keep-stats.json"
	want=$(gen --density 0.5 --simulate "$D/keep.sfimg")
	run gen --density 0.5 --cache-ratio 0.3 --pin "$D/model.json" "$D/keep.sfimg"
	[ "$output" = "$want" ]
	[ "$output" != "$(gen --density 0.5 --simulate "$D/coact.sfimg")" ]
}

@test "an image packed with --keep of every neuron decodes as the full image" {
	need_direct
	sf-coact --select-neurons --gamma 1 "$D/model.json" -o "$D/all.json"
	sf-pack --model "$MODEL" --keep "$D/all.json" -o "$D/keepall.sfimg"
	run gen "$D/keepall.sfimg"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$D/dense.txt")" ]
	run gen --density 0.5 "$D/keepall.sfimg"
	[ "$output" = "$(gen --density 0.5 "$D/id.sfimg")" ]
}

@test "mix4-5m with a cache: the peak resident set stays under --ram" {
	need_shared
	need_direct
	need_plain_build
	local m=$SF_SHARED/models/mix4-5m need ram
	# no read-ahead: the least figure is without it, which the budget
	# here would otherwise take back from the cache
	local run=(sf-run --ppl "$CORPUS" --max-tokens 600 --window 128 --density 0.5 --prefetch 0)
	sf-pack --model "$m" -o "$D/rss5.sfimg"
	# the figures without room for a cache, then room for 4 MiB of it
	run --separate-stderr "${run[@]}" --ram 1M "$D/rss5.sfimg"
	[ "$status" -eq 1 ]
	need=$(echo "${stderr_lines[0]}" | sed -E 's/.*: ([0-9]+) bytes needed.*/\1/')
	ram=$((need + 4 * 1048576))
	if [ -x /usr/bin/time ]; then
		/usr/bin/time -f %M -o "$D/rss.txt" "${run[@]}" --ram "$ram" --stats "$D/rss.json" \
			"$D/rss5.sfimg" > /dev/null
		[ $(($(tail -n 1 "$D/rss.txt") * 1024)) -le "$ram" ]
	else
		"${run[@]}" --ram "$ram" --stats "$D/rss.json" "$D/rss5.sfimg" > /dev/null
	fi
	# the cache gets what the process's measured resident set leaves, which
	# moves by up to 200 KB between two runs
	jq -e ".memory.ram == $ram and .memory.total <= $ram and .memory.cache > 3500000" "$D/rss.json"
	jq -e '.cache.admissions > .cache.evictions and .cache.evictions > 0' "$D/rss.json"
	jq -e '.memory.peak_rss > 0 and .memory.peak_rss <= .memory.ram' "$D/rss.json"
	rm -f "$D/rss5.sfimg"
}

@test "--compute-ratio: the neurons chosen at the prompt restrict the FFN; equal to --simulate" {
	need_direct
	local want
	want=$(gen --budget 0.5 --compute-ratio 0.4 --static "$D/task.json" --simulate "$D/coact.sfimg")
	[ -n "$want" ]
	[ "$want" != "$(gen --budget 0.5 --simulate "$D/coact.sfimg")" ]
	run gen --budget 0.5 --compute-ratio 0.4 --static "$D/task.json" --cache-ratio 0.2 -t 1 \
		--stats "$D/c.json" "$D/coact.sfimg"
	[ "$status" -eq 0 ]
	[ "$output" = "$want" ]
	# 4 layers: the first and the last dense by default; round(0.4 * 384)
	# neurons in each of the other two, half static, for the 23 passes
	# after the prompt's 2 (the prompt's last pass samples the first token)
	jq -e '.compute.layers == 2 and .compute.set_entries == 308 and .compute.static == 154' "$D/c.json"
	jq -e '.compute.passes == 23 and .compute.ffn_out_entries_per_pass <= 308' "$D/c.json"
	jq -e '.compute.ffn_out_entries_per_pass > 0 and .compute.ffn_in_rows_per_pass >= 308' "$D/c.json"
	# every pass in range at budget 1: exactly the set
	run gen --compute-ratio 0.25 --dense-layers 0 --alpha 0.1 --beta 0.1 --compute-delta 0.15 \
		--static "$D/task.json" --stats "$D/c.json" "$D/coact.sfimg"
	[ "$output" = "$(gen --compute-ratio 0.25 --dense-layers 0 --alpha 0.1 --beta 0.1 \
		--compute-delta 0.15 --static "$D/task.json" --simulate "$D/coact.sfimg")" ]
	jq -e '.compute.layers == 3 and .compute.set_entries == 288 and .compute.ffn_out_entries_per_pass == 288' "$D/c.json"
	jq -e '.compute.ffn_in_rows_per_pass >= 288 and .compute.static == 3 * 58' "$D/c.json"
}

@test "--compute-ratio 1 is the plain run; perplexity equals --simulate" {
	need_direct
	run gen --budget 0.5 --compute-ratio 1 --dense-layers none "$D/coact.sfimg"
	[ "$output" = "$(gen --budget 0.5 "$D/coact.sfimg")" ]
	local a b
	a=$(sf-run --ppl "$CORPUS" --max-tokens 150 --window 64 --density 0.5 --compute-ratio 0.3 \
		--static "$D/model.json" --simulate "$D/coact.sfimg" | jq .ppl)
	b=$(sf-run --ppl "$CORPUS" --max-tokens 150 --window 64 --density 0.5 --compute-ratio 0.3 \
		--static "$D/model.json" --cache-ratio 0.3 "$D/coact.sfimg" | jq .ppl)
	[ "$a" = "$b" ]
	[ "$a" != "$(sf-run --ppl "$CORPUS" --max-tokens 150 --window 64 --density 0.5 "$D/coact.sfimg" | jq .ppl)" ]
}

@test "--compute-ratio: errors" {
	run --separate-stderr sf-run -p x -n 1 --alpha 0.3 "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: --static, --compute-delta, --alpha, --beta and --dense-layers need --compute-ratio" ]
	run --separate-stderr sf-run -p x -n 1 --compute-ratio 0.4 --dense-layers 9 "$D/id.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: --dense-layers: layer 9 is out of range: the model has layers 0..3" ]
	sf-pack --model "$MODEL" --resident ffn -o "$D/ffnres.sfimg"
	run --separate-stderr sf-run -p x -n 1 --compute-ratio 0.4 "$D/ffnres.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $D/ffnres.sfimg: --compute-ratio: layer 0's FFN is resident (sf-pack --resident): its neurons cannot be restricted" ]
}

@test "--free-riders: entries in pages read anyway join the top tier; equal to --simulate" {
	need_direct
	local want
	want=$(gen --density 0.3 --free-riders --simulate "$D/coact.sfimg")
	[ -n "$want" ]
	[ "$want" != "$(gen --density 0.3 --simulate "$D/coact.sfimg")" ]
	run gen --density 0.3 --free-riders --stats "$D/fr.json" "$D/coact.sfimg"
	[ "$status" -eq 0 ]
	[ "$output" = "$want" ]
	jq -e '.free_riders > 0 and .free_riders_per_token > 0 and .groups.ffn_out.free_riders > 0' "$D/fr.json"
	jq -e '.groups.ffn_out.k_top > 115' "$D/fr.json"
	# the riders do not depend on the cache, collapse, queue depth or threads
	run gen --density 0.3 --free-riders --cache-ratio 0.3 --cache-policy lru --collapse 0 --qd 2 \
		-t 1 --pin "$D/model.json" "$D/coact.sfimg"
	[ "$output" = "$want" ]
	run gen --density 0.3 --free-riders --collapse 16 --seg-admit 0.2 --cache-ratio 0.1 "$D/coact.sfimg"
	[ "$output" = "$want" ]
	# middle-tier entries ride too, and at budget 1 there is nothing to add
	want=$(gen --k-top 0.2 --k-mid 0.3 --free-riders --simulate "$D/coact.sfimg")
	run gen --k-top 0.2 --k-mid 0.3 --free-riders --stats "$D/fr.json" "$D/coact.sfimg"
	[ "$output" = "$want" ]
	jq -e '.free_riders > 0' "$D/fr.json"
	run gen --free-riders --stats "$D/fr.json" "$D/coact.sfimg"
	[ "$output" = "$(cat "$D/dense.txt")" ]
	jq -e '.free_riders == 0' "$D/fr.json"
	# riders stay within the computation set
	want=$(gen --density 0.3 --free-riders --compute-ratio 0.4 --static "$D/task.json" --simulate "$D/coact.sfimg")
	run gen --density 0.3 --free-riders --compute-ratio 0.4 --static "$D/task.json" \
		--stats "$D/fr.json" "$D/coact.sfimg"
	[ "$output" = "$want" ]
	jq -e '.free_riders > 0 and .compute.ffn_out_entries_per_pass <= 308' "$D/fr.json"
}

# --- passes of several tokens (-b): the union read once, each token its own

@test "-b: the same text at any batch size, from reads and --simulate, both tiers, cache on and off" {
	need_direct
	local long
	long=$(head -c 1500 "$SF_ROOT/README.md" | tr '\n' ' ')
	gen --budget 0.5 -b 1 -p "$long" --simulate "$D/coact.sfimg" > "$D/b1.txt"
	[ -s "$D/b1.txt" ]
	for b in 2 7 64 300; do
		run gen --budget 0.5 -b "$b" -p "$long" "$D/coact.sfimg"
		[ "$output" = "$(cat "$D/b1.txt")" ]
		run gen --budget 0.5 -b "$b" -p "$long" --cache-ratio 0.3 --cache-policy lru "$D/coact.sfimg"
		[ "$output" = "$(cat "$D/b1.txt")" ]
	done
	run gen --budget 0.5 -b 64 -p "$long" --simulate -t 1 "$D/coact.sfimg"
	[ "$output" = "$(cat "$D/b1.txt")" ]
	# TEAL and --free-riders
	gen --density 0.3 --free-riders -b 1 -p "$long" "$D/coact.sfimg" > "$D/d1.txt"
	run gen --density 0.3 --free-riders -b 64 -p "$long" "$D/coact.sfimg"
	[ "$output" = "$(cat "$D/d1.txt")" ]
	! cmp -s "$D/d1.txt" "$D/b1.txt"
}

@test "-b: trellis codes give the same text at any batch size" {
	need_direct
	sf-encode --model "$MODEL" --method trellis -t 2 -q -o "$D/trellis.sfq"
	sf-pack --model "$MODEL" --placement "$D/coact.json" --codes "$D/trellis.sfq" -q \
		-o "$D/trellis.sfimg"
	local long
	long=$(head -c 1200 "$SF_ROOT/README.md" | tr '\n' ' ')
	gen --k-top 0.3 --k-mid 0.3 -b 1 -p "$long" "$D/trellis.sfimg" > "$D/t1.txt"
	for b in 7 64; do
		run gen --k-top 0.3 --k-mid 0.3 -b "$b" -p "$long" "$D/trellis.sfimg"
		[ "$output" = "$(cat "$D/t1.txt")" ]
	done
	run gen --k-top 0.3 --k-mid 0.3 -b 64 -p "$long" --simulate "$D/trellis.sfimg"
	[ "$output" = "$(cat "$D/t1.txt")" ]
}

@test "-b: at budget 1 a prompt reads each region once a pass" {
	need_direct
	local p n b1 b64
	p=$(head -c 1100 "$SF_ROOT/README.md" | tr '\n' ' ')
	# the prompt's passes, one sampled token and no pass after it
	sf-run -p "$p" -n 1 --temp 0 -q -b 1 --stats "$D/s1.json" "$D/id.sfimg" > /dev/null
	sf-run -p "$p" -n 1 --temp 0 -q -b 64 --stats "$D/s64.json" "$D/id.sfimg" > /dev/null
	n=$(jq .tokens "$D/s1.json")
	[ "$n" -gt 200 ]
	[ "$n" -eq "$(jq .tokens "$D/s64.json")" ]
	b1=$(jq .bytes_moved "$D/s1.json")
	b64=$(jq .bytes_moved "$D/s64.json")
	# ceil(n / 64) passes of one token's bytes, and the read ahead of the
	# pass after the last (one group) at most another token's
	[ "$b64" -gt 0 ]
	[ "$b64" -le $(( b1 / n * ((n + 63) / 64 + 1) )) ]
}

@test "-b: --ppl from an image gives the same perplexity at any batch size" {
	need_direct
	run sf-run --ppl "$CORPUS" --max-tokens 300 --window 128 --budget 0.5 -b 1 "$D/coact.sfimg"
	[ "$status" -eq 0 ]
	local ref=$output
	run sf-run --ppl "$CORPUS" --max-tokens 300 --window 128 --budget 0.5 -b 64 "$D/coact.sfimg"
	[ "$output" = "$ref" ]
	run sf-run --ppl "$CORPUS" --max-tokens 300 --window 128 --budget 0.5 -b 64 --simulate \
		"$D/coact.sfimg"
	[ "$output" = "$ref" ]
}

@test "-b: matrices of 1,024 rows (a pass computes them at a padded stride, then copies) give -b 1's perplexity, q4 and q8, all held and from reads" {
	need_direct
	local dt ref
	"$SF_FIXTURES/mkmodel" -o "$D/k1024" --hidden 1024 --intermediate 2048 --layers 1 \
		--heads 8 --kv-heads 2 --tokenizer "$MODEL" > /dev/null
	head -c 1500 "$SF_ROOT/man/sf-run.1" > "$D/k1024.txt"
	for dt in q4 q8; do
		sf-pack -q --model "$D/k1024" --dtype $dt -o "$D/k1024-$dt.sfimg"
		ref=$(sf-run -q --ppl "$D/k1024.txt" --window 64 -b 1 "$D/k1024-$dt.sfimg" | jq .nll)
		[ -n "$ref" ]
		[ "$(sf-run -q --ppl "$D/k1024.txt" --window 64 -b 16 --ram 1000000000 \
			"$D/k1024-$dt.sfimg" | jq .nll)" = "$ref" ]
		[ "$(sf-run -q --ppl "$D/k1024.txt" --window 64 -b 5 --cache-policy none \
			"$D/k1024-$dt.sfimg" | jq .nll)" = "$ref" ]
		sf-run -q --ppl "$D/k1024.txt" --window 64 -b 1 --density 0.4 "$D/k1024-$dt.sfimg" \
			> "$D/k1.json"
		run sf-run -q --ppl "$D/k1024.txt" --window 64 -b 16 --density 0.4 \
			"$D/k1024-$dt.sfimg"
		[ "$output" = "$(cat "$D/k1.json")" ]
	done
}

@test "the KV cache: f16 by default, -ctk/-ctv f32 or q8_0, near f32's perplexity; a bad type refused" {
	local f32 f16 q8
	f32=$(sf-run -ctk f32 -ctv f32 --ppl "$CORPUS" --max-tokens 512 "$D/id.sfimg" | jq .ppl)
	f16=$(sf-run --ppl "$CORPUS" --max-tokens 512 "$D/id.sfimg" | jq .ppl)
	q8=$(sf-run --cache-type-k q8_0 --cache-type-v q8_0 --ppl "$CORPUS" --max-tokens 512 \
		"$D/id.sfimg" | jq .ppl)
	echo "f32 $f32 f16 $f16 q8_0 $q8"
	jq -n -e --argjson a "$f32" --argjson b "$f16" --argjson c "$q8" \
		'($b / $a - 1 | fabs) < 0.001 and ($c / $a - 1 | fabs) < 0.005 and $a != $c'
	sf-run -p "$PROMPT" -n 4 -q --stats "$D/kv.json" -ctv q8_0 "$D/id.sfimg" > /dev/null
	# mix4-1m: 4 layers, 2 KV heads of 32: f16 keys 128 bytes, q8_0 values 68, a position
	jq -e '.memory.kv == 1024 * 4 * (128 + 68) and .memory.kv_positions == 1024' "$D/kv.json"
	# in use: the prompt's positions and the 3 fed back of 4 tokens
	jq -e '.kv_cache.type_v == "q8_0" and .kv_cache.bytes_in_use == .kv_cache.positions * 4 *
		(128 + 68) and .kv_cache.positions == .prompt_tokens + 3' "$D/kv.json"
	run --separate-stderr sf-run -ctk q4_0 -p x "$D/id.sfimg"
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: --cache-type-k: 'q4_0' is not f32, f16 or q8_0" ]
}

@test "at the least --ram the KV cache holds 128 positions: 64 tokens done, then one line at its end" {
	need_plain_build	# the least figure is the resident set's, which ASan's shadow moves
	local least
	least=$(sf-pack --info "$D/id.sfimg" | jq .ram_at_least)
	run --separate-stderr sf-run -p "$PROMPT" -n 1000 --temp 0 --ram "$least" \
		--stats "$D/least.json" "$D/id.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[-1]}" =~ ^sf-run:\ $D/id.sfimg:\ the\ context\ reached\ ([0-9]+)\ positions,\ all\ that\ --ram\ $least\ leaves\ the\ KV\ cache\ room\ for:\ give\ more\ --ram,\ or\ -c$ ]]
	local n=${BASH_REMATCH[1]}
	[ "$n" -ge 128 ] && [ "$n" -lt 1000 ]
	jq -e --argjson n "$n" '.memory.kv_positions == $n and .decode_tokens >= 64 and
		.memory.peak_rss <= .memory.ram and .memory.least <= .memory.ram' "$D/least.json"
	# -c asks for its positions: refused when they do not fit (f32: 2 MiB
	# for 1024, past the least's 128 f16 ones and its 1 MiB of room)
	run --separate-stderr sf-run -p "$PROMPT" -n 4 -c 1024 -ctk f32 -ctv f32 --ram "$least" \
		"$D/id.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" == *"KV cache "*" (1024 positions)"*"give --ram "*" or more" ]]
}

@test "--ram below the resident region: refused on the same figures before the region is read (a memory cgroup of that size would kill a reader)" {
	need_plain_build	# the resident set is the figure
	command -v /usr/bin/time >/dev/null || skip "/usr/bin/time absent (Debian's time)"
	# an untied 40000-token head: about 20 MB resident
	"$SF_FIXTURES/mkmodel" -o "$D/head" --hidden 256 --intermediate 256 --layers 2 --no-tie \
		--vocab 40000 --tokenizer "$MODEL" >/dev/null
	sf-pack --model "$D/head" -q -o "$D/head.sfimg"
	run --separate-stderr /usr/bin/time -f "peak %M" sf-run -p "$PROMPT" -n 4 --ram 1M \
		"$D/head.sfimg"
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 3 ]	# the refusal, then time's two lines
	[[ "${stderr_lines[0]}" == "sf-run: $D/head.sfimg: --ram 1048576: "* ]]
	[[ "${stderr_lines[0]}" =~ resident\ ([0-9]+),.*give\ --ram\ ([0-9]+)\ or\ more$ ]]
	local resident=${BASH_REMATCH[1]} deferred=${BASH_REMATCH[2]}
	[ "$resident" -gt 20000000 ]
	[[ "${stderr_lines[2]}" =~ ^peak\ ([0-9]+)$ ]]
	[ $((BASH_REMATCH[1] * 1024)) -lt $((resident / 2)) ]	# the region was not read
	# a budget the region fits: read, then refused on the same figures
	run --separate-stderr /usr/bin/time -f "peak %M" sf-run -p "$PROMPT" -n 4 \
		--ram "$resident" "$D/head.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ give\ --ram\ ([0-9]+)\ or\ more$ ]]
	local read=${BASH_REMATCH[1]}
	[[ "${stderr_lines[2]}" =~ ^peak\ ([0-9]+)$ ]]
	[ $((BASH_REMATCH[1] * 1024)) -gt "$resident" ]
	# the process's own part moves by a few hundred KiB from run to run
	[ $((read - deferred)) -lt 1048576 ] && [ $((deferred - read)) -lt 1048576 ]
	# and at the figure it names it runs
	run sf-run -p "$PROMPT" -n 4 -q --ram "$read" "$D/head.sfimg"
	[ "$status" -eq 0 ]
	# on the region read after the model was bound: a run without --ram's nll
	[ "$(sf-run --ppl "$CORPUS" --max-tokens 64 -q --ram 1G "$D/head.sfimg" | jq .nll)" = \
	  "$(sf-run --ppl "$CORPUS" --max-tokens 64 -q "$D/head.sfimg" | jq .nll)" ]
}
