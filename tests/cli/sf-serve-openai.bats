#!/usr/bin/env bats
# sf-serve with OpenAI's official Node client (the npm package openai):
# a completion, a chat, a stream with usage, errors, an abort mid-stream
# (tests/clients/openai.mjs). Skipped without node and npm; the package
# is installed once into SF_OPENAI_DIR (default /var/tmp/sf-openai).

load helpers
load serve-helpers

OPENAI_VERSION=4.104.0

setup_file() {
	export SF_OPENAI_DIR=${SF_OPENAI_DIR:-/var/tmp/sf-openai}
}

need_openai() {
	command -v node >/dev/null || skip "node absent: OpenAI's Node client not tested"
	[ -f "$SF_OPENAI_DIR/node_modules/openai/package.json" ] && return 0
	command -v npm >/dev/null || skip "npm absent: OpenAI's Node client not tested"
	mkdir -p "$SF_OPENAI_DIR"
	(cd "$SF_OPENAI_DIR" && timeout 300 npm install --save-exact --no-audit --no-fund \
		"openai@$OPENAI_VERSION" >&2) ||
		skip "npm install openai@$OPENAI_VERSION failed (no registry?)"
}

@test "sf-serve: OpenAI's Node client: models, completion, chat, a stream with usage, errors, an abort" {
	need_openai
	SF_SERVE_TOKEN_DELAY_MS=5 start_server --api-key s3cret --parallel 2
	run node "$SF_ROOT/tests/clients/openai.mjs" "$SF_OPENAI_DIR" "$URL/v1"
	echo "$output"
	[ "$status" -eq 0 ]
	want=$(sf-run --model "$MODEL" -p "In the beginning" -n 16 --temp 0 -q | jq -Rs 'rtrimstr("\n")')
	[ "$(echo "$output" | sed -n 's/^text //p')" = "$want" ]
	# the aborted stream freed its slot
	for _ in $(seq 100); do
		[ "$(curl -s -H 'Authorization: Bearer s3cret' "$URL/metrics" |
			sed -n 's/^sf_slots_busy //p')" = 0 ] && break
		sleep 0.05
	done
	[ "$(curl -s -H 'Authorization: Bearer s3cret' "$URL/metrics" |
		sed -n 's/^sf_cancelled_total //p')" = 1 ]
}
