#!/usr/bin/env bats
# sf-serve over the embedded model on a loopback port the kernel picks
# (--port 0, read back from the "listening on" line): every endpoint,
# greedy text against sf-run's, streaming, errors, auth, CORS, the queue,
# a client that goes away, /health while busy, SIGTERM's drain.

load helpers
load serve-helpers

@test "sf-serve: --help lists the options; no model is a usage error" {
	run sf-serve --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"--parallel"* ]]
	run sf-serve
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-serve: --model MODEL is required" ]
	run sf-serve --model "$MODEL" --port 70000
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-serve: --port: 70000 is out of range: expected 0..65535" ]
	run sf-serve --model "$MODEL" --log-format xml
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-serve: --log-format: 'xml': expected text or json" ]
}

@test "sf-serve: a model that does not open is a data error, exit 1" {
	run sf-serve --model "$BATS_TEST_TMPDIR/none" --port 0 -q
	[ "$status" -eq 1 ]
	[[ "$output" == "sf-serve: "*"none"* ]]
}

@test "sf-serve: /health, /v1/models and /metrics" {
	start_server
	run curl -s "$URL/health"
	[ "$output" = '{"status":"ok"}' ]
	run curl -s "$URL/v1/models"
	[ "$(echo "$output" | jq -r '.object, .data[0].id, .data[0].object')" = "$(printf 'list\nmix4-1m\nmodel')" ]
	run curl -s "$URL/metrics"
	[[ "$output" == *"# TYPE sf_requests_total counter"* ]]
	[[ "$output" == *"sf_slots_total 2"* ]]
}

@test "sf-serve: a greedy completion is sf-run's text, with usage and finish_reason" {
	start_server
	want=$(sf-run --model "$MODEL" -p "In the beginning" -n 24 --temp 0 -q)
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0, "unknown_field": [1]}'
	[ "$code" = 200 ]
	[ "$(echo "$output" | jq -r .choices[0].text)" = "$want" ]
	[ "$(echo "$output" | jq -r '.object, .choices[0].finish_reason, .usage.completion_tokens, .usage.total_tokens')" = "$(printf 'text_completion\nlength\n24\n32')" ]
}

@test "sf-serve: a greedy chat is sf-run -cnv's answer; content as text parts too" {
	start_server
	want=$(echo "Hello there" | sf-run --model "$MODEL" -cnv --chat-template chatml -n 16 --temp 0 -q)
	post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hello there"}], "max_completion_tokens": 16, "temperature": 0}'
	[ "$code" = 200 ]
	[ "$(echo "$output" | jq -r .choices[0].message.content)" = "$want" ]
	[ "$(echo "$output" | jq -r '.object, .choices[0].message.role')" = "$(printf 'chat.completion\nassistant')" ]
	[ "$(echo "$output" | jq '.choices[0].message | has("reasoning_content")')" = false ]
	post /v1/chat/completions '{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}], "max_tokens": 16, "temperature": 0}'
	[ "$(echo "$output" | jq -r .choices[0].message.content)" = "$want" ]
}

# gpt-oss's harmony (helpers.bash's harmony_model, ',' made <|message|>):
# the model's answer ", a. ..." becomes a channel of no name, not final.
@test "sf-serve: gpt-oss's channels: the final one's text the content, the others' reasoning_content (ollama: thinking), streamed or not, as sf-run -cnv splits them" {
	local m reason want
	m=$(harmony_model "<|message|>")
	want=$(echo "Hello" | sf-run -q --model "$m" -cnv -n 6 --temp 0 2>"$BATS_TEST_TMPDIR/reason")
	# sf-run ends each channel's line at a marker; reasoning_content is
	# the channels' text as written, one after the other
	reason=$(tr -d '\n' <"$BATS_TEST_TMPDIR/reason")
	[ -n "$reason" ]
	MODEL=$m start_server
	post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0}'
	[ "$code" = 200 ]
	[ "$(echo "$output" | jq -r .choices[0].message.content)" = "$want" ]
	[ "$(echo "$output" | jq -r .choices[0].message.reasoning_content)" = "$reason" ]
	[ "$(echo "$output" | jq -r .usage.completion_tokens)" = 6 ]
	post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0, "stream": true}' -N
	chunks=$(echo "$output" | sed -n 's/^data: //p' | sed '$d')
	[ "$(echo "$chunks" | jq -j '.choices[0].delta.reasoning_content // empty')" = "$reason" ]
	[ "$(echo "$chunks" | jq -j '.choices[0].delta.content // empty')" = "$want" ]
	post /api/chat '{"model": "model", "messages": [{"role": "user", "content": "Hello"}], "options": {"temperature": 0, "num_predict": 6}, "stream": false}'
	[ "$(echo "$output" | jq -r .message.thinking)" = "$reason" ]
	[ "$(echo "$output" | jq -r .message.content)" = "$want" ]
	post /api/chat '{"model": "model", "messages": [{"role": "user", "content": "Hello"}], "options": {"temperature": 0, "num_predict": 6}}' -N
	[ "$(echo "$output" | jq -j '.message.thinking // empty')" = "$reason" ]
	# a completion's text is as the model writes it, markers dropped
	post /v1/completions '{"prompt": "Hello", "max_tokens": 6, "temperature": 0}'
	[ "$(echo "$output" | jq '.choices[0] | has("reasoning_content")')" = false ]
}

@test "sf-serve: a stream is the same text, a chunk a token, role first, usage, then [DONE]" {
	start_server
	post /v1/chat/completions '{"messages": [{"role": "system", "content": "In the beginning"}, {"role": "user", "content": "God"}, {"role": "assistant", "content": "created"}, {"role": "user", "content": "the heaven"}], "max_tokens": 12, "temperature": 0}'
	whole=$(echo "$output" | jq -r .choices[0].message.content)
	post /v1/chat/completions '{"messages": [{"role": "system", "content": "In the beginning"}, {"role": "user", "content": "God"}, {"role": "assistant", "content": "created"}, {"role": "user", "content": "the heaven"}], "max_tokens": 12, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}' -N
	[ "$code" = 200 ]
	data=$(echo "$output" | sed -n 's/^data: //p')
	[ "$(echo "$data" | tail -n 1)" = "[DONE]" ]
	chunks=$(echo "$data" | sed '$d')
	[ "$(echo "$chunks" | head -n 1 | jq -r .choices[0].delta.role)" = assistant ]
	[ "$(echo "$chunks" | jq -j '.choices[0].delta.content // empty')" = "$whole" ]
	[ "$(echo "$chunks" | tail -n 2 | head -n 1 | jq -r .choices[0].finish_reason)" = length ]
	[ "$(echo "$chunks" | tail -n 1 | jq -c '.choices, .usage.completion_tokens')" = "$(printf '[]\n12')" ]
	# a completion's stream: a chunk a token (this chat's answer is
	# byte-fallback tabs, which the decoder holds until their run ends)
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 8, "temperature": 0, "stream": true}' -N
	[ "$(echo "$output" | sed -n 's/^data: //p' | sed '$d' | jq -s 'map(select(.choices[0].text != "")) | length')" = 8 ]
}

@test "sf-serve: stop strings cut the text, streamed or not; finish_reason stop" {
	start_server
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0, "stop": ["same c", "zzz"]}'
	[ "$(echo "$output" | jq -r '.choices[0].text, .choices[0].finish_reason')" = "$(printf ', and the same of the \nstop')" ]
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0, "stop": "same c", "stream": true}' -N
	[ "$(echo "$output" | sed -n 's/^data: //p' | sed '$d' | jq -j .choices[0].text)" = ", and the same of the " ]
}

@test "sf-serve: sampling with a seed repeats; the penalties are taken" {
	start_server
	body='{"prompt": "Love", "max_tokens": 16, "temperature": 0.9, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "seed": 7, "repeat_penalty": 1.1, "frequency_penalty": 0.5, "presence_penalty": 0.2}'
	post /v1/completions "$body"
	[ "$code" = 200 ]
	first=$(echo "$output" | jq -r .choices[0].text)
	post /v1/completions "$body"
	[ "$(echo "$output" | jq -r .choices[0].text)" = "$first" ]
}

@test "sf-serve: malformed JSON, wrong types and bad values are 400 in OpenAI's shape" {
	start_server
	post /v1/completions '{"prompt": "x", '
	[ "$code" = 400 ]
	[ "$(echo "$output" | jq -r .error.type)" = invalid_request_error ]
	[ "$(echo "$output" | jq -r .error.code)" = invalid_json ]
	post /v1/completions '[1, 2]'
	[ "$code" = 400 ]
	post /v1/completions '{"prompt": 5}'
	[ "$code" = 400 ]
	[ "$(echo "$output" | jq -r .error.message)" = "'prompt': expected a string (or an array of one string)" ]
	post /v1/completions '{"prompt": "x", "temperature": "hot"}'
	[ "$(echo "$output" | jq -r .error.message)" = "'temperature': expected a number" ]
	post /v1/completions '{"prompt": "x", "top_p": 2}'
	[ "$code" = 400 ]
	post /v1/completions '{"prompt": "x", "stop": [1]}'
	[ "$code" = 400 ]
	post /v1/chat/completions '{"messages": [{"role": "wizard", "content": "x"}]}'
	[ "$code" = 400 ]
	post /v1/chat/completions '{"messages": "hi"}'
	[ "$code" = 400 ]
	post /v1/chat/completions '{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}'
	[ "$code" = 400 ]
	post /v1/chat/completions '{}'
	[ "$(echo "$output" | jq -r .error.message)" = "'messages' is required" ]
	# the server is still up
	[ "$(curl -s "$URL/health")" = '{"status":"ok"}' ]
}

@test "sf-serve: a prompt beyond the context is 400 before any stream; a large body 413; 404, 405" {
	start_server -c 16 --max-body 2048
	post /v1/completions '{"prompt": "In the beginning God created the heaven and the earth, and the earth was without form", "stream": true}'
	[ "$code" = 400 ]
	[ "$(echo "$output" | jq -r .error.code)" = context_length_exceeded ]
	post /v1/completions "{\"prompt\": \"$(head -c 4000 /dev/zero | tr '\0' a)\"}"
	[ "$code" = 413 ]
	run curl -s -w '\n%{http_code}' "$URL/v1/nothing"
	[ "${lines[1]}" = 404 ]
	[ "$(echo "${lines[0]}" | jq -r .error.type)" = not_found_error ]
	run curl -s -o /dev/null -w '%{http_code}' "$URL/v1/completions"
	[ "$output" = 405 ]
}

@test "sf-serve: --api-key wants Authorization: Bearer; /health stays public; CORS and OPTIONS" {
	start_server --api-key s3cret
	run curl -s -w '\n%{http_code}' "$URL/v1/models"
	[ "${lines[1]}" = 401 ]
	[ "$(echo "${lines[0]}" | jq -r .error.type)" = authentication_error ]
	run curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' "$URL/v1/models"
	[ "$output" = 401 ]
	run curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cret' "$URL/v1/models"
	[ "$output" = 200 ]
	run curl -s -o /dev/null -w '%{http_code}' "$URL/health"
	[ "$output" = 200 ]
	run curl -s -D - -o /dev/null -X OPTIONS -H 'Origin: http://example.org' \
		-H 'Access-Control-Request-Method: POST' "$URL/v1/chat/completions"
	[[ "$output" == "HTTP/1.1 204"* ]]
	[[ "$output" == *"Access-Control-Allow-Origin: *"* ]]
	[[ "$output" == *"Access-Control-Allow-Headers: Authorization, Content-Type"* ]]
}

@test "sf-serve: a full queue is 503 with Retry-After; /health answers while busy; a client that goes away frees its slot" {
	SF_SERVE_TOKEN_DELAY_MS=20 start_server --parallel 1 --queue 0 -t 1
	long='{"prompt": "In the beginning", "max_tokens": 1000, "ignore_eos": true, "stream": true}'
	stream_in_background /v1/completions "$long"
	[ "$(metric sf_slots_busy)" = 1 ]
	run curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health"
	[ "$output" = 200 ]
	run curl -s -D - -H 'Content-Type: application/json' -d '{"prompt": "x"}' "$URL/v1/completions"
	[[ "$output" == "HTTP/1.1 503"* ]]
	[[ "$output" == *"Retry-After: 1"* ]]
	[[ "$output" == *'"code":"queue_full"'* ]]
	drop_client
	[ "$(metric sf_cancelled_total)" = 1 ]
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 4}'
	[ "$code" = 200 ]
}

@test "sf-serve: a non-streaming client that goes away cancels its work" {
	SF_SERVE_TOKEN_DELAY_MS=20 start_server --parallel 1 -t 1
	run curl -s --max-time 0.5 -H 'Content-Type: application/json' \
		-d '{"prompt": "In the beginning", "max_tokens": 1000, "ignore_eos": true}' "$URL/v1/completions"
	[ "$status" -eq 28 ]	# curl's timeout
	for _ in $(seq 100); do [ "$(metric sf_slots_busy)" = 0 ] && break; sleep 0.05; done
	[ "$(metric sf_cancelled_total)" = 1 ]
}

@test "sf-serve: a client that goes away while queued leaves the queue at once" {
	SF_SERVE_TOKEN_DELAY_MS=20 start_server --parallel 1 --queue 1 -t 1
	stream_in_background /v1/completions '{"prompt": "In the beginning", "max_tokens": 1000, "ignore_eos": true, "stream": true}'
	run curl -s --max-time 0.5 -H 'Content-Type: application/json' -d '{"prompt": "x"}' \
		"$URL/v1/completions"
	[ "$status" -eq 28 ]
	for _ in $(seq 100); do [ "$(metric sf_queue_depth)" = 0 ] && break; sleep 0.05; done
	[ "$(metric sf_queue_depth)" = 0 ]
	[ "$(metric sf_cancelled_total)" = 1 ]
	[ "$(metric sf_slots_busy)" = 1 ]
}

@test "sf-serve: a prompt that begins as the slot's last one reuses its KV cache; the text is the same" {
	start_server --parallel 1
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 8, "temperature": 0}'
	first=$(echo "$output" | jq -r .choices[0].text)
	[ "$(metric sf_prompt_tokens_cached_total)" = 0 ]
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 8, "temperature": 0}'
	[ "$(echo "$output" | jq -r .choices[0].text)" = "$first" ]
	[ "$(metric sf_prompt_tokens_cached_total)" = 7 ]	# all but the last of 8
	# the conversation goes on: the prompt and its answer, then more
	prompt="In the beginning$first God"
	post /v1/completions "$(jq -nc --arg p "$prompt" '{prompt: $p, max_tokens: 8, temperature: 0}')"
	[ "$(echo "$output" | jq -r .choices[0].text)" = "$(sf-run --model "$MODEL" -p "$prompt" -n 8 --temp 0 -q)" ]
	[ "$(metric sf_prompt_tokens_cached_total)" -gt 14 ]
}

@test "sf-serve: two slots decode together in one pass a token, each its own text (sf-run's)" {
	SF_SERVE_TOKEN_DELAY_MS=5 start_server --parallel 2
	curl -s -H 'Content-Type: application/json' \
		-d '{"prompt": "Love", "max_tokens": 20, "temperature": 0}' \
		"$URL/v1/completions" >"$BATS_TEST_TMPDIR/love" 3>&- &
	CP=$!
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 20, "temperature": 0}'
	wait "$CP"
	CP=
	[ "$(echo "$output" | jq -r .choices[0].text)" = "$(sf-run --model "$MODEL" -p "In the beginning" -n 20 --temp 0 -q)" ]
	[ "$(jq -r .choices[0].text "$BATS_TEST_TMPDIR/love")" = "$(sf-run --model "$MODEL" -p "Love" -n 20 --temp 0 -q)" ]
	[ "$(metric sf_batched_tokens_max)" = 2 ]
}

@test "sf-serve: a mixture of experts (a random Mixtral) in two slots: each greedy completion is sf-run's text" {
	MODEL=$BATS_TEST_TMPDIR/mixtral
	"$SF_FIXTURES/mkmodel" -o "$MODEL" --arch mixtral --experts 4 --experts-used 2 \
		--layers 2 --tokenizer "$SF_ROOT/models/mix4-1m"
	SF_SERVE_TOKEN_DELAY_MS=5 start_server --parallel 2
	curl -s -H 'Content-Type: application/json' \
		-d '{"prompt": "Love", "max_tokens": 12, "temperature": 0}' \
		"$URL/v1/completions" >"$BATS_TEST_TMPDIR/love" 3>&- &
	CP=$!
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 12, "temperature": 0}'
	wait "$CP"
	CP=
	[ "$(echo "$output" | jq -r .choices[0].text)" = "$(sf-run --model "$MODEL" -p "In the beginning" -n 12 --temp 0 -q)" ]
	[ "$(jq -r .choices[0].text "$BATS_TEST_TMPDIR/love")" = "$(sf-run --model "$MODEL" -p "Love" -n 12 --temp 0 -q)" ]
}

@test "sf-serve: from an image, a greedy completion is sf-run IMAGE's text; /metrics counts the bytes read and the cache's hits" {
	img=$BATS_TEST_TMPDIR/id.sfimg
	sf-pack -q --model "$MODEL" -o "$img"
	SERVE_IMAGE=$img start_server --parallel 2
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 16, "temperature": 0}'
	[ "$code" = 200 ]
	[ "$(echo "$output" | jq -r .choices[0].text)" = "$(sf-run -q -p "In the beginning" -n 16 --temp 0 "$img")" ]
	[ "$(metric sf_flash_bytes_read_total)" -gt 0 ]
	# the column cache's counters, and a ratio of them in [0, 1]
	[ "$(metric sf_cache_hits_total)" -le "$(metric sf_cache_lookups_total)" ]
	ratio=$(metric sf_cache_hit_ratio)
	jq -ne --argjson r "$ratio" '$r >= 0 and $r <= 1'
}

@test "sf-serve: IMAGE --ram counts every slot's KV cache, caches columns in what is left, and gives sf-run's text" {
	img=$BATS_TEST_TMPDIR/id.sfimg
	sf-pack -q --model "$MODEL" -o "$img"
	# too little: one line with the figures, the slots' KV caches among them
	run --separate-stderr sf-serve "$img" --port 0 --parallel 3 --ram 1000 -q
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ $stderr =~ ^"sf-serve: $img: --ram 1000: "[0-9]+" bytes needed: ".*"KV cache "[0-9]+" (128 positions)" ]]
	local one=$(sf-serve "$img" --port 0 --parallel 1 --ram 1000 -q 2>&1 | sed -n 's/.*KV cache \([0-9]*\) .*/\1/p')
	local three=$(echo "$stderr" | sed -n 's/.*KV cache \([0-9]*\) .*/\1/p')
	[ "$three" -eq $((3 * one)) ]
	# what it needs, whatever the build (a sanitizer's process is larger),
	# and 6 MB for the cache and held groups
	local least=$(sf-serve "$img" --port 0 --parallel 2 --ram 1000 -q 2>&1 |
		sed -n 's/.*give --ram \([0-9]*\) or more$/\1/p')
	SERVE_IMAGE=$img start_server --parallel 2 --ram $((least + 6000000)) -v
	grep -q "memory: .* KV caches [0-9]* (2 slots of [0-9]* positions)" "$LOG"
	post /v1/completions '{"prompt": "In the beginning", "max_tokens": 16, "temperature": 0}'
	[ "$code" = 200 ]
	[ "$(echo "$output" | jq -r .choices[0].text)" = "$(sf-run -q -p "In the beginning" -n 16 --temp 0 "$img")" ]
	# what is left holds groups whole or caches columns
	local held cache
	held=$(sed -n 's/.*held groups \([0-9]*\), cache \([0-9]*\)$/\1/p' "$LOG")
	cache=$(sed -n 's/.*held groups \([0-9]*\), cache \([0-9]*\)$/\2/p' "$LOG")
	[ $((held + cache)) -gt 1000000 ]
	run sf-serve --model "$MODEL" --ram 1000000
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-serve: --ram needs an IMAGE, not --model" ]
}

@test "sf-serve: SIGTERM finishes the request in flight, then exits 0; --log-format json" {
	SF_SERVE_TOKEN_DELAY_MS=2 start_server --parallel 1 -t 1 --log-format json
	curl -s -H 'Content-Type: application/json' \
		-d '{"prompt": "In the beginning", "max_tokens": 200, "ignore_eos": true}' \
		"$URL/v1/completions" >"$BATS_TEST_TMPDIR/answer" 3>&- &
	CP=$!
	for _ in $(seq 100); do [ "$(metric sf_slots_busy)" = 1 ] && break; sleep 0.02; done
	kill -TERM "$SP"
	wait "$SP"
	SP=
	wait "$CP"
	CP=
	[ "$(jq -r '.usage.completion_tokens' "$BATS_TEST_TMPDIR/answer")" = 200 ]
	grep -q '"path":"/v1/completions","status":200' "$LOG"
	grep -q 'finishing the requests in flight' "$LOG"
}
