#!/usr/bin/env bats
# The long oracle checks (make check-full): sf-run --model reproduces the
# PyTorch perplexity of reference.json for every genre of both shared
# models, 16,384 tokens each.

load ../cli/helpers

@test "mix4-1m perplexity on fortunes matches reference.json" { check_ppl mix4-1m fortunes; }
@test "mix4-1m perplexity on gcide matches reference.json" { check_ppl mix4-1m gcide; }
@test "mix4-1m perplexity on man matches reference.json" { check_ppl mix4-1m man; }
@test "mix4-5m perplexity on kjv matches reference.json" { check_ppl mix4-5m kjv; }
@test "mix4-5m perplexity on fortunes matches reference.json" { check_ppl mix4-5m fortunes; }
@test "mix4-5m perplexity on gcide matches reference.json" { check_ppl mix4-5m gcide; }
@test "mix4-5m perplexity on man matches reference.json" { check_ppl mix4-5m man; }
