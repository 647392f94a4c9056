#!/usr/bin/env bats
# sf-serve's ollama API (/api/generate, /api/chat, /api/tags, /api/show,
# /api/version) over the embedded model on a loopback port: greedy text
# against sf-run's, newline-delimited JSON streams, the final object's
# counts, errors in ollama's shape, a client that goes away.

load helpers
load serve-helpers

# The lines of a stream in $output but the last, and the last, as
# $chunks and $end.
split_stream() {
	local lines
	lines=$(echo "$output" | sed '/^$/d')
	chunks=$(echo "$lines" | sed '$d')
	end=$(echo "$lines" | tail -n 1)
}

@test "sf-serve ollama: /, /api/version, /api/tags lists the model, /api/show" {
	start_server
	run curl -s "$URL/"
	[ "$output" = "Ollama is running" ]
	run curl -s "$URL/api/version"
	[ "$(echo "$output" | jq -r .version)" != null ]
	run curl -s "$URL/api/tags"
	[ "$(echo "$output" | jq -r '.models | length')" = 1 ]
	[ "$(echo "$output" | jq -r '.models[0] | .name, .model, .details.format')" = "$(printf 'mix4-1m:latest\nmix4-1m:latest\nsafetensors')" ]
	[ "$(echo "$output" | jq -r '.models[0].size > 0 and (.models[0].digest | length) > 0 and (.models[0].modified_at | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T"))')" = true ]
	post /api/show '{"model": "mix4-1m"}'
	[ "$code" = 200 ]
	[ "$(echo "$output" | jq -r '.model_info.context_length, .capabilities[0]')" = "$(printf '1024\ncompletion')" ]
	post /api/show '{"model": "llama3"}'
	[ "$code" = 404 ]
	[ "$output" = '{"error":"model '"'"'llama3'"'"' not found"}' ]
}

@test "sf-serve ollama: a greedy /api/generate is sf-run's text, stream:false and streamed; the final object's counts" {
	start_server
	want=$(sf-run --model "$MODEL" -p "In the beginning" -n 24 --temp 0 -q)
	body='{"model": "mix4-1m", "prompt": "In the beginning", "stream": false, "options": {"temperature": 0, "num_predict": 24, "num_ctx": 4096}}'
	post /api/generate "$body"
	[ "$code" = 200 ]
	[ "$(echo "$output" | jq -r .response)" = "$want" ]
	[ "$(echo "$output" | jq -r '.model, .done, .done_reason, .prompt_eval_count, .eval_count')" = "$(printf 'mix4-1m:latest\ntrue\nlength\n8\n24')" ]
	[ "$(echo "$output" | jq '[.total_duration, .load_duration, .prompt_eval_duration, .eval_duration] | all(type == "number" and . >= 0 and floor == .)')" = true ]
	[ "$(echo "$output" | jq '.total_duration >= .eval_duration and .eval_duration > 0')" = true ]
	# stream by default: a line a token, each done:false, then the end
	run curl -sN -D "$BATS_TEST_TMPDIR/headers" "$URL/api/generate" \
		-d '{"model": "mix4-1m", "prompt": "In the beginning", "options": {"temperature": 0, "num_predict": 24}}'
	grep -qi '^Content-Type: application/x-ndjson' "$BATS_TEST_TMPDIR/headers"
	split_stream
	[ "$(echo "$chunks" | wc -l)" -ge 20 ]
	[ "$(echo "$chunks" | jq -s 'all(.done == false and (.created_at | type) == "string")')" = true ]
	[ "$(echo "$chunks" | jq -j .response)" = "$want" ]
	[ "$(echo "$end" | jq -r '.response, .done, .done_reason, .prompt_eval_count, .eval_count')" = "$(printf '\ntrue\nlength\n8\n24')" ]
}

@test "sf-serve ollama: a greedy /api/chat is sf-run -cnv's answer, streamed or not" {
	start_server
	want=$(echo "Hello there" | sf-run --model "$MODEL" -cnv --chat-template chatml -n 16 --temp 0 -q)
	body='{"model": "mix4-1m:latest", "messages": [{"role": "user", "content": "Hello there"}], "options": {"temperature": 0, "num_predict": 16}'
	post /api/chat "$body, \"stream\": false}"
	[ "$code" = 200 ]
	[ "$(echo "$output" | jq -r .message.content)" = "$want" ]
	[ "$(echo "$output" | jq -r '.message.role, .done, .done_reason, .eval_count')" = "$(printf 'assistant\ntrue\nlength\n16')" ]
	post /api/chat "$body}" -N
	split_stream
	[ "$(echo "$chunks" | jq -j .message.content)" = "$want" ]
	[ "$(echo "$end" | jq -r '.message.content, .done, .eval_count')" = "$(printf '\ntrue\n16')" ]
	# no messages: ollama's "load the model", done at once
	post /api/chat '{"model": "mix4-1m", "messages": []}'
	[ "$code" = 200 ]
	[ "$(echo "$output" | jq -r '.done, .done_reason')" = "$(printf 'true\nload')" ]
}

@test "sf-serve ollama: /api/generate in the chat template with system, raw as is; stop in options" {
	start_server --chat-template chatml
	post /api/generate '{"model": "mix4-1m", "system": "In the beginning", "prompt": "God", "stream": false, "options": {"temperature": 0, "num_predict": 12}}'
	[ "$(echo "$output" | jq -r .response)" = "$(echo God | sf-run --model "$MODEL" -cnv --chat-template chatml -p "In the beginning" -n 12 --temp 0 -q)" ]
	post /api/generate '{"model": "mix4-1m", "prompt": "In the beginning", "raw": true, "stream": false, "options": {"temperature": 0, "num_predict": 24, "stop": ["same c"]}}'
	[ "$(echo "$output" | jq -r '.response, .done_reason')" = "$(printf ', and the same of the \nstop')" ]
}

@test "sf-serve ollama: errors are {\"error\": ...}: malformed 400, unknown model 404, wrong types 400" {
	start_server
	# each case: the status, the path, the body, then the answer
	while IFS='|' read -r want path body answer; do
		post "$path" "$body"
		echo "$path $body: $code $output"
		[ "$code" = "$want" ]
		[ "$output" = "$answer" ]
	done <<-'EOF'
	404|/api/chat|{"model": "mistral", "messages": [{"role": "user", "content": "x"}]}|{"error":"model 'mistral' not found"}
	400|/api/generate|{"prompt": "x"}|{"error":"model is required"}
	400|/api/generate|{"model": "mix4-1m", "prompt": "x", "options": {"temperature": "hot"}}|{"error":"'temperature': expected a number"}
	400|/api/generate|{"model": "mix4-1m", "prompt": "x", "options": [1]}|{"error":"'options': expected an object"}
	400|/api/generate|{"model": "mix4-1m", "prompt": 5}|{"error":"'prompt': expected a string (or an array of one string)"}
	400|/api/chat|{"model": "mix4-1m", "messages": [{"role": "wizard", "content": "x"}]}|{"error":"'messages[0].role': 'wizard' is not system, developer, user or assistant"}
	404|/api/nothing|{}|{"error":"no such endpoint"}
	EOF
	post /api/generate '{"model": "mix4-1m", "prompt": '
	[ "$code" = 400 ]
	[[ "$(echo "$output" | jq -r .error)" == "the body is not JSON: "* ]]
	[ "$(curl -s "$URL/health")" = '{"status":"ok"}' ]
}

@test "sf-serve ollama: a streaming client that goes away frees its slot" {
	SF_SERVE_TOKEN_DELAY_MS=20 start_server --parallel 1 -t 1
	stream_in_background /api/generate '{"model": "mix4-1m", "prompt": "In the beginning", "options": {"num_predict": 1000, "ignore_eos": true}}'
	[ "$(metric sf_slots_busy)" = 1 ]
	[ "$(head -n 1 "$BATS_TEST_TMPDIR/stream" | jq -r .done)" = false ]
	drop_client
	[ "$(metric sf_cancelled_total)" = 1 ]
}
