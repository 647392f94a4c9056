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
# 60; more on a machine others share). From flash instead: IMAGE= an image,
# RAM= its --ram (every slot's KV cache counted), CGROUP_RAM= a memory
# cgroup around the server (its page cache charged; tests/bench/
# flash-lib.bash), CTX= each slot's context (default 512: the streams'
# tokens must fit the positions --ram grants). STREAM_TOKENS= each
# stream's tokens (default 256); RATE_ONLY=1 skips the load part.
# Writes $SF_BENCH_OUT/serve-load.json (default build/bench/serve-load.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/bench/flash-lib.bash"
bin=${SF_BIN:-$root/bin}
model=${MODEL:-$root/models/mix4-1m}
# what sf-serve and sf-run open: the model in RAM, or the image
if [ -n "${IMAGE:-}" ]; then
	what=("$IMAGE")
	serve_what=("$IMAGE" -c "${CTX:-512}" ${RAM:+--ram "$RAM"})
else
	what=(--model "$model")
	serve_what=(--model "$model")
fi
out=${SF_BENCH_OUT:-$root/build/bench}
tokens=${TOKENS:-48}
wait_s=${WAIT:-60}
slack_kb=${SLACK_KB:-4096}
mkdir -p "$out"
work=$(mktemp -d)
sp=
cg=
cleanup() {
	[ -n "$sp" ] && kill -9 "$sp" 2>/dev/null
	rm -rf "$work"
	[ -z "$cg" ] || rmdir "$cg" 2>/dev/null || true
}
trap cleanup EXIT
[ -n "${CGROUP_RAM:-}" ] && flash_cgroup serve-load
[ -n "${IMAGE:-}" ] && dd if="$IMAGE" iflag=nocache count=0 status=none

# the server itself in the cgroup: $! is sf-serve once the subshell execs
(
	if [ -n "$cg" ]; then
		echo "$CGROUP_RAM" >"$cg/memory.limit_in_bytes"
		echo "$BASHPID" >"$cg/cgroup.procs"
	fi
	exec "$bin/sf-serve" "${serve_what[@]}" --port 0 --parallel 4 --queue 64 -t 2
) 2>"$work/log" &
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
	"$bin/sf-run" "${what[@]}" -p "${prompts[$i]}" -n "$tokens" --temp 0 -q >"$work/want$i"
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

rss_first=$(rss)
for batch in 0 1 2 3; do
	[ -n "${RATE_ONLY:-}" ] && break
	for j in $(seq 0 15); do
		request $((batch * 16 + j)) &
	done
	wait $(jobs -p | grep -v "^$sp$") 2>/dev/null || true
	[ "$batch" = 0 ] && rss_first=$(rss)
done
rss_last=$(rss)
outcomes() {	# WHAT: the requests that ended so (none with RATE_ONLY)
	cat "$work"/code* 2>/dev/null | grep -c "^$1\$" || true
}
same=$(outcomes same)
differs=$(outcomes differs)
bad=$(outcomes 400)
dropped=$(outcomes dropped)
unanswered=$(outcomes unanswered)

# total tokens/s: 1 stream, then 4 at once
stream_tokens=${STREAM_TOKENS:-256}
rate() {
	local n=$1 t0 t1
	t0=$(date +%s.%N)
	for j in $(seq "$n"); do
		curl -s --max-time "$wait_s" -d "{\"prompt\": \"The\", \"max_tokens\": $stream_tokens, \"ignore_eos\": true, \"temperature\": 0}" \
			"$url/v1/completions" >/dev/null &
	done
	wait $(jobs -p | grep -v "^$sp$") 2>/dev/null || true
	t1=$(date +%s.%N)
	echo "$n * $stream_tokens / ($t1 - $t0)" | bc -l
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
if [ -z "${RATE_ONLY:-}" ]; then
	[ "$same" -eq 56 ] && [ "$differs" -eq 0 ] && [ "$bad" -eq 4 ] && [ "$dropped" -eq 4 ] &&
		[ $((rss_last - rss_first)) -le "$slack_kb" ] ||
		{ echo "serve-load: FAILED" >&2; exit 1; }
fi
echo "serve-load: passed"
