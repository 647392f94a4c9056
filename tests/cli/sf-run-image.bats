#!/usr/bin/env bats
# sf-run IMAGE: the sparse decoder on images of the embedded mix4-1m
# (identity and coact placements, scalar codes, calibrated tiers): budget 1
# is the dense decoder; below it the output equals --simulate whatever the
# cache, collapse, queue depth and threads; faults are one clear line and
# exit 1. Images live under $SF_TMP (disk: O_DIRECT works there).

load helpers

setup_file() {
	local base=${SF_TMP:-$BATS_FILE_TMPDIR}
	mkdir -p "$base"
	export D
	D=$(mktemp -d "$base/sf-run-image.XXXXXX")
	export XDG_CACHE_HOME=$D/xdg	# no device peak unless a test stores one
	export CORPUS=$SF_ROOT/man/sf-run.1
	"$SF_BIN/sf-profile" --model "$MODEL" --max-tokens 150 -q "$CORPUS" -o "$D/p.sft"
	"$SF_BIN/sf-coact" -q "$D/p.sft" -o "$D/p.sfc"
	"$SF_BIN/sf-place" -q --method coact "$D/p.sfc" -o "$D/coact.json"
	"$SF_BIN/sf-encode" --model "$MODEL" --method scalar -t 2 -o "$D/codes.sfq"
	"$SF_BIN/sf-encode" --model "$MODEL" --calibrate --codes "$D/codes.sfq" -t 2 \
		--corpus "$CORPUS" --budgets 0.5 --calib-tokens 8 --window 8 -o "$D/calib.json"
	"$SF_BIN/sf-pack" --model "$MODEL" -o "$D/id.sfimg"
	"$SF_BIN/sf-pack" --model "$MODEL" --placement "$D/coact.json" --codes "$D/codes.sfq" \
		--calib "$D/calib.json" -o "$D/coact.sfimg"
	export PROMPT="In the beginning"
	"$SF_BIN/sf-run" --model "$MODEL" -p "$PROMPT" -n 24 --temp 0 -q > "$D/dense.txt"
	export DIRECT=1
	"$SF_BIN/sf-run" -p "$PROMPT" -n 1 --temp 0 -q "$D/id.sfimg" > /dev/null 2> "$D/direct.err" ||
		DIRECT=0
}

teardown_file() {
	rm -rf "$D"
}

need_direct() {
	[ "$DIRECT" = 1 ] || skip "O_DIRECT refused where the images are ($D): $(cat "$D/direct.err")"
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
	[ "${lines[0]}" = "sf-run: --model DIR and IMAGE cannot be combined" ]
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
	run gen --budget 0.5 --ram 8M --no-direct "$D/coact.sfimg"
	[ "$output" = "$want" ]
	want=$(gen --density 0.4 --simulate "$D/coact.sfimg")
	run gen --density 0.4 --cache-ratio 0.3 "$D/coact.sfimg"
	[ "$output" = "$want" ]
	want=$(gen --k-top 0.2 --k-mid 0.3 --simulate "$D/coact.sfimg")
	run gen --k-top 0.2 --k-mid 0.3 --collapse 2 "$D/coact.sfimg"
	[ "$output" = "$want" ]
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
	run --separate-stderr sf-run -p "$PROMPT" -n 8 --temp 0 --bench --budget 0.5 \
		--cache-ratio 0.2 "$D/coact.sfimg"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.tokens == 15 and .decode_tokens == 8 and .backend == "io_uring"'
	echo "$output" | jq -e '.bytes_moved == .uring.bytes and .requests == .uring.requests'
	echo "$output" | jq -e '.latency_seconds.p50 > 0 and .latency_seconds.p99 >= .latency_seconds.p50'
	echo "$output" | jq -e '.budget > 0.4 and .budget < 0.6 and (.groups | length) == 4'
	echo "$output" | jq -e '.cache.lookups > 0 and .bytes_moved_over_needed >= 1'
	echo "$output" | jq -e '[.read_length_histogram[]] | add > 0'
	echo "$output" | jq -e '.collapse.setting | test("without a device peak")'
	sf-run --ppl "$CORPUS" --max-tokens 100 --window 32 --density 0.5 --stats "$D/s.json" \
		"$D/coact.sfimg" > "$D/ppl.json"
	jq -e '.ppl > 1' "$D/ppl.json"
	jq -e '.mode == "ppl" and .tokens == 99 and .bytes_moved > 0' "$D/s.json"
}

@test "-v says how collapse auto decides: no probe data, or the stored device peak" {
	need_direct
	run --separate-stderr sf-run -p x -n 1 -q -v "$D/id.sfimg"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"collapse auto without a device peak (sf-run --probe-device): fixed gap 4"* ]]
	[[ "$stderr" == *"memory: "*" bytes: resident "* ]]
	run --separate-stderr sf-run -p x -n 1 -q -v --device-peak 2000000000 "$D/id.sfimg"
	[[ "$stderr" == *"collapse auto: 4, off while above 80% of the device peak 2000 MB/s"* ]]
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

@test "a RAM budget too small is refused with the figures" {
	run --separate-stderr sf-run -p x -n 1 --ram 1M "$D/coact.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ $D/coact.sfimg:\ --ram\ 1048576:\ [0-9]+\ bytes\ needed:\ resident\ [0-9]+,\ KV\ cache\ and\ state\ [0-9]+,\ buffers\ [0-9]+,\ cache\ [0-9]+$ ]]
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

@test "collapse auto reads the device peak --probe-device stored; a damaged file is refused" {
	need_direct
	local x=$D/xdg2 f
	f=$x/sparseflash/device-$(stat -c %Hd-%Ld "$D/id.sfimg").json
	mkdir -p "$x/sparseflash"
	echo '{"format": "sparseflash-device", "version": 1, "large": {"bytes_per_s": 3e9}}' > "$f"
	XDG_CACHE_HOME=$x run --separate-stderr sf-run -p x -n 1 -q -v "$D/id.sfimg"
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"collapse auto: 4, off while above 80% of the device peak 3000 MB/s"* ]]
	echo '{"format": "other"}' > "$f"
	XDG_CACHE_HOME=$x run --separate-stderr sf-run -p x -n 1 -q "$D/id.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $f: not a device file of sf-run --probe-device (remove it and probe again)" ]
}
