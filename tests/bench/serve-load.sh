#!/usr/bin/env bash
# sf-serve under load, on loopback only and bounded in count and time:
# 64 completions, 16 at a time, against --parallel 4 slots and a queue of
# 64, of which every 16th is malformed JSON and every 16th (another)
# dropped mid-stream. Every good one must get sf-run's greedy text for its
# prompt, the malformed ones a 400, and the server's resident set must
# stay flat (within SLACK_KB) from the first batch to the last. Then the
# total tokens/s of 1 and of 4 concurrent greedy streams (one pass a token
# for all of them: sf-serve(1), Slots and concurrency).
# Usage: make bench BENCH=tests/bench/serve-load.sh (or SF_BIN=... tests/bench/serve-load.sh)
# MODEL= (default the embedded mix4-1m), TOKENS= per request (default 48),
# WAIT= seconds a request may take before it counts as unanswered (default
# 60; more on a machine others share).
# Writes $SF_BENCH_OUT/serve-load.json (default build/bench/serve-load.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
model=${MODEL:-$root/models/mix4-1m}
out=${SF_BENCH_OUT:-$root/build/bench}
tokens=${TOKENS:-48}
wait_s=${WAIT:-60}
slack_kb=${SLACK_KB:-4096}
mkdir -p "$out"
work=$(mktemp -d)
sp=
cleanup() {
	[ -n "$sp" ] && kill -9 "$sp" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

"$bin/sf-serve" --model "$model" --port 0 --parallel 4 --queue 64 -t 2 2>"$work/log" &
sp=$!
port=
for _ in $(seq 600); do
	port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$work/log")
	[ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
	sleep 0.05
done
url=http://127.0.0.1:$port
rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$sp/status"; }

prompts=("In the beginning" "Love" "The program reads" "A man" "It is" "Thou shalt" "SYNOPSIS" "The quality of")
for i in "${!prompts[@]}"; do
	"$bin/sf-run" --model "$model" -p "${prompts[$i]}" -n "$tokens" --temp 0 -q >"$work/want$i"
done

# request k: malformed when k % 16 == 5, dropped mid-stream when k % 16 == 9
request() {
	local k=$1 i=$(($1 % ${#prompts[@]}))
	local body
	body=$(jq -nc --arg p "${prompts[$i]}" --argjson n "$tokens" \
		'{prompt: $p, max_tokens: $n, temperature: 0}')
	if [ $((k % 16)) -eq 5 ]; then
		curl -s -o /dev/null -w '%{http_code}\n' --max-time "$wait_s" -d '{"prompt": "x",' "$url/v1/completions" \
			>"$work/code$k"
	elif [ $((k % 16)) -eq 9 ]; then
		body=$(echo "$body" | jq -c '.stream = true | .max_tokens = 1000 | .ignore_eos = true')
		curl -sN --max-time "$wait_s" -d "$body" "$url/v1/completions" | head -c 600 >/dev/null || true
		echo dropped >"$work/code$k"
	else
		# sf-run ends its text with a newline when it wrote any: an empty
		# completion is no output at all (on a random model most greedy
		# tokens lie past the tokenizer's vocabulary and decode to nothing)
		if curl -sf --max-time "$wait_s" -d "$body" "$url/v1/completions" >"$work/answer$k" &&
			jq -j .choices[0].text "$work/answer$k" >"$work/got$k"; then
			[ -s "$work/got$k" ] && echo >>"$work/got$k"
			if cmp -s "$work/got$k" "$work/want$i"; then echo same; else echo differs; fi
		else
			echo unanswered
		fi >"$work/code$k"
	fi
}

rss_first=
for batch in 0 1 2 3; do
	for j in $(seq 0 15); do
		request $((batch * 16 + j)) &
	done
	wait $(jobs -p | grep -v "^$sp$") 2>/dev/null || true
	[ -z "$rss_first" ] && rss_first=$(rss)
done
rss_last=$(rss)
same=$(cat "$work"/code* | grep -c '^same$' || true)
differs=$(cat "$work"/code* | grep -c '^differs$' || true)
bad=$(cat "$work"/code* | grep -c '^400$' || true)
dropped=$(cat "$work"/code* | grep -c '^dropped$' || true)
unanswered=$(cat "$work"/code* | grep -c '^unanswered$' || true)

# total tokens/s: 1 stream, then 4 at once
rate() {
	local n=$1 t0 t1
	t0=$(date +%s.%N)
	for j in $(seq "$n"); do
		curl -s --max-time 120 -d "{\"prompt\": \"The\", \"max_tokens\": 256, \"ignore_eos\": true, \"temperature\": 0}" \
			"$url/v1/completions" >/dev/null &
	done
	wait $(jobs -p | grep -v "^$sp$") 2>/dev/null || true
	t1=$(date +%s.%N)
	echo "$n * 256 / ($t1 - $t0)" | bc -l
}
one=$(rate 1)
four=$(rate 4)
metrics=$(curl -s "$url/metrics")
kill -TERM "$sp"
wait "$sp"
sp=

jq -n --argjson same "$same" --argjson differs "$differs" --argjson bad "$bad" \
	--argjson dropped "$dropped" --argjson unanswered "$unanswered" \
	--argjson rss0 "$rss_first" --argjson rss1 "$rss_last" \
	--argjson one "$one" --argjson four "$four" \
	--argjson maxpass "$(echo "$metrics" | sed -n 's/^sf_batched_tokens_max //p')" \
	'{good_same: $same, good_differs: $differs, malformed_400: $bad, dropped: $dropped,
	  unanswered: $unanswered,
	  rss_kb_first: $rss0, rss_kb_last: $rss1, tokens_per_second_1: $one,
	  tokens_per_second_4: $four, speedup_4: ($four / $one), batched_tokens_max: $maxpass}' |
	tee "$out/serve-load.json"
[ "$same" -eq 56 ] && [ "$differs" -eq 0 ] && [ "$bad" -eq 4 ] && [ "$dropped" -eq 4 ] &&
	[ $((rss_last - rss_first)) -le "$slack_kb" ] ||
	{ echo "serve-load: FAILED" >&2; exit 1; }
echo "serve-load: passed"
