#!/usr/bin/env bats
# The long oracle checks (make check-full): sf-run --model reproduces the
# PyTorch perplexity of reference.json for every genre of the shared
# models, 16,384 tokens each; for mix4-46m (hidden 1024) also its tokenizer
# ids and greedy continuations (its logits: tests/unit/test_forward.c under
# SF_FULL=1).

load ../cli/helpers

@test "mix4-1m perplexity on fortunes matches reference.json" { check_ppl mix4-1m fortunes; }
@test "mix4-1m perplexity on gcide matches reference.json" { check_ppl mix4-1m gcide; }
@test "mix4-1m perplexity on man matches reference.json" { check_ppl mix4-1m man; }
@test "mix4-5m perplexity on kjv matches reference.json" { check_ppl mix4-5m kjv; }
@test "mix4-5m perplexity on fortunes matches reference.json" { check_ppl mix4-5m fortunes; }
@test "mix4-5m perplexity on gcide matches reference.json" { check_ppl mix4-5m gcide; }
@test "mix4-5m perplexity on man matches reference.json" { check_ppl mix4-5m man; }

# mix4-46m: the wide model, every part of its reference.json through sf-run
# (the loops count in s: bats' run sets i)
ref46() { jq -r "$1" "$SF_SHARED/models/mix4-46m/reference.json"; }

@test "mix4-46m: --verbose-prompt lists reference.json's ids for every sample string" {
	need_shared
	local m=$SF_SHARED/models/mix4-46m n s prompt got
	n=$(ref46 '.encode | length')
	[ "$n" -ge 6 ]
	for ((s = 0; s < n; s++)); do
		prompt=$(ref46 ".encode[$s].text")
		run --separate-stderr sf-run --model "$m" -p "$prompt" -n 0 --verbose-prompt
		[ "$status" -eq 0 ]
		got=$(printf '%s\n' "${stderr_lines[@]}" | awk '/^ *[0-9]+ -> /{ printf "%s%s", (n++ ? "," : ""), $1 }')
		echo "encode[$s]: $got"
		[ "$got" = "$(ref46 ".encode[$s].ids | join(\",\")")" ]
	done
}

@test "mix4-46m: greedy generation gives reference.json's continuations" {
	need_shared
	local m=$SF_SHARED/models/mix4-46m n s prompt
	n=$(ref46 '.greedy | length')
	[ "$n" -ge 4 ]
	for ((s = 0; s < n; s++)); do
		prompt=$(ref46 ".encode[$s].text")
		# the sample's prompt is that of encode[i]
		[ "$(ref46 ".greedy[$s].prompt_ids | join(\",\")")" = "$(ref46 ".encode[$s].ids | join(\",\")")" ]
		run --separate-stderr sf-run --model "$m" -p "$prompt" -n 32 --temp 0 --echo
		[ "$status" -eq 0 ]
		echo "greedy[$s]: $output"
		[ "$output" = "$(ref46 ".greedy[$s].text")" ]
		[[ "$stderr" == *"decode 32 tokens"* ]]
	done
}

@test "mix4-46m perplexity on kjv matches reference.json" { check_ppl mix4-46m kjv; }
@test "mix4-46m perplexity on fortunes matches reference.json" { check_ppl mix4-46m fortunes; }
@test "mix4-46m perplexity on gcide matches reference.json" { check_ppl mix4-46m gcide; }
@test "mix4-46m perplexity on man matches reference.json" { check_ppl mix4-46m man; }
