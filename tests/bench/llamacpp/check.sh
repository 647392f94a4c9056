#!/usr/bin/env bash
# Checks tests/bench/llamacpp.bash end to end: mix4-5m to GGUF (BF16 and
# F32) whose tokenizer gives reference.json's ids and whose greedy decode
# gives its continuations; Q4_0, Q8_0 and Q4_K_M quantized, decoded with and
# without repacking; a random untied model without tokenizer decoded.
# A few seconds of CPU. Exit 0, 1 on a mismatch, 77 when npm cannot install.
# Usage: tests/bench/llamacpp/check.sh [CACHE_DIR (default /var/tmp/sf-llamacpp)]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
shared=${SF_SHARED:-$root/../shared}
fixtures=${SF_FIXTURES:-$root/build/opt/fixtures}
model=$shared/models/mix4-5m
ref=$model/reference.json
. "$root/tests/bench/llamacpp.bash"
llamacpp_setup "${1:-/var/tmp/sf-llamacpp}" || exit 77
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0

check() {	# WHAT WANT GOT
	if [ "$2" = "$3" ]; then
		echo "ok: $1"
	else
		printf 'FAIL: %s\n  want %s\n  got  %s\n' "$1" "$2" "$3"
		fail=1
	fi
}

# The greedy continuations of reference.json: matching tokens per prompt.
greedy() {	# GGUF
	local i n np want got
	n=$(jq '.greedy | length' "$ref")
	for i in $(seq 0 $((n - 1))); do
		jq -c ".greedy[$i].prompt_ids" "$ref" > "$work/ids"
		np=$(jq ".greedy[$i].prompt_ids | length" "$ref")
		want=$(jq -c ".greedy[$i].ids[$np:]" "$ref")
		got=$(llamacpp_decode "$1" 2 "$(jq length <<<"$want")" "$work/ids" | jq -c .ids)
		jq -n --argjson a "$want" --argjson b "$got" \
			'[range($a | length) | select($a[.] == $b[.])] | length | tostring' -r
	done | paste -sd/ -
}

llamacpp_gguf "$model" "$work/bf16.gguf"
llamacpp_gguf "$model" "$work/f32.gguf" f32
n=$(jq '.encode | length' "$ref")
for i in $(seq 0 $((n - 1))); do
	check "tokenize $(jq -c ".encode[$i].text" "$ref")" "$(jq -c ".encode[$i].ids" "$ref")" \
		"$(llamacpp_tokenize "$work/bf16.gguf" "$(jq -r ".encode[$i].text" "$ref")" | tr -d ' ')"
done
all=$(jq -r '[.greedy[] | (.ids | length) - (.prompt_ids | length) | tostring] | join("/")' "$ref")
check "greedy BF16 (tokens matching, per prompt)" "$all" "$(greedy "$work/bf16.gguf")"
check "greedy F32 (tokens matching, per prompt)" "$all" "$(greedy "$work/f32.gguf")"

for q in Q4_0 Q8_0 Q4_K_M; do
	llamacpp_quantize "$work/bf16.gguf" "$work/$q.gguf" "$q"
	jq -c ".greedy[0].prompt_ids" "$ref" > "$work/ids"
	on=$(llamacpp_decode "$work/$q.gguf" 2 16 "$work/ids")
	off=$(LLAMACPP_REPACK=0 llamacpp_decode "$work/$q.gguf" 2 16 "$work/ids")
	echo "$q: greedy $(greedy "$work/$q.gguf") of $all; repack on: $(jq -c \
		'{repacked_tensors, weight_buffers_mib}' <<<"$on"), off: $(jq -c \
		'{repacked_tensors, weight_buffers_mib}' <<<"$off")"
	check "$q: LLAMACPP_REPACK=0 repacks nothing" 0 "$(jq .repacked_tensors <<<"$off")"
done

"$fixtures/mkmodel" -o "$work/rand" --hidden 256 --intermediate 688 --layers 2 --heads 4 \
	--kv-heads 2 --vocab 1024 --no-tie
llamacpp_gguf "$work/rand" "$work/rand.gguf"
llamacpp_quantize "$work/rand.gguf" "$work/rand.q4.gguf" Q4_0 2>/dev/null
echo '[1, 5, 77, 900, 3]' > "$work/ids"
for g in rand rand.q4; do
	check "random model $g decodes 8 tokens" 8 \
		"$(llamacpp_decode "$work/$g.gguf" 2 8 "$work/ids" | jq '.ids | length')"
done
exit $fail
