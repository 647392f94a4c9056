#!/usr/bin/env bats
# sf-run --conversation (-cnv): the chat template, the text and tokens of
# each turn, the KV cache carried over, the stops, Ctrl-C, an image.

load helpers

CHATML='"{% for m in messages %}{{ \"<|im_start|>\" + m.role + \"\\n\" + m.content + \"<|im_end|>\\n\" }}{% endfor %}{% if add_generation_prompt %}{{ \"<|im_start|>assistant\\n\" }}{% endif %}"'

# The ids --verbose-prompt lists after its "LABEL: N tokens" line, on one line.
ids_of() {
	awk -v l="sf-run: $1: " 'index($0, l) == 1 { on = 1; next } on && /^ *[0-9]+ -> / { printf "%s ", $1; next } { on = 0 }'
}

@test "no chat template and no --chat-template: one line, exit 1" {
	run --separate-stderr sf-run --model "$MODEL" -cnv </dev/null
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $MODEL: no chat_template in tokenizer_config.json: give --chat-template NAME" ]
	local m
	m=$(chat_model '"{{ messages | tojson }}"')
	run --separate-stderr sf-run --model "$m" --conversation </dev/null
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $m: tokenizer_config.json's chat_template is none of the templates sf-run writes: give --chat-template NAME" ]
}

@test "--chat-template: an unknown name lists the known ones; it needs -cnv, which refuses --ppl, --bench, --echo" {
	run --separate-stderr sf-run --model "$MODEL" -cnv --chat-template chatml2
	[ "$status" -eq 2 ]
	[[ "${stderr_lines[0]}" == "sf-run: --chat-template: 'chatml2' is not one of chatml, phi4, llama2, "*", llama3, gpt-oss" ]]
	[ "${stderr_lines[1]}" = "Try 'sf-run --help'." ]
	run --separate-stderr sf-run --model "$MODEL" --chat-template chatml -p hi
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: --chat-template needs --conversation" ]
	for opt in "--ppl x" --bench --echo; do
		run --separate-stderr sf-run --model "$MODEL" -cnv $opt
		[ "$status" -eq 2 ]
		[ "${stderr_lines[0]}" = "sf-run: --conversation and ${opt% *} cannot be combined" ]
	done
	run --separate-stderr sf-run --model "$MODEL" -cnv -f -
	[ "$status" -eq 2 ]
	run --separate-stderr sf-run --model "$MODEL" -i
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: -i: llama.cpp's option is not supported: use sf-run -cnv (--conversation) to chat" ]
}

@test "the model's template, found by its markers: each turn's text and tokens, -p the system message" {
	local m
	m=$(chat_model "$CHATML")
	run --separate-stderr sf-run --model "$m" -cnv -p "Be brief." -n 3 --temp 0 -v --verbose-prompt \
		<<<$'Hello\nWho are you'
	[ "$status" -eq 0 ]
	printf '%s\n' "${stderr_lines[@]}" >"$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: chat template chatml (tokenizer_config.json); answers end at the end-of-text token' "$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: turn 1: 63 tokens: "<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\nHello<|im_end|>\\n<|im_start|>assistant\\n"' "$BATS_TEST_TMPDIR/err"
	# the second turn: the end of the first answer's turn, then the user's
	grep -qx 'sf-run: turn 2: 44 tokens: "<|im_end|>\\n<|im_start|>user\\nWho are you<|im_end|>\\n<|im_start|>assistant\\n"' "$BATS_TEST_TMPDIR/err"
	[ "$(ids_of "turn 2" <"$BATS_TEST_TMPDIR/err")" = "876 127 324 980 648 127 1016 13 1019 127 324 980 302 496 127 1016 372 266 13 990 944 939 397 365 1019 127 324 980 648 127 1016 13 1019 127 324 980 302 496 127 1016 616 388 445 13 " ]
	# each turn is tokenized as a prompt of its text is, the first with BOS
	local t1 t2
	t1=$(printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n')
	t2=$(printf '<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n')
	[ "$(ids_of "turn 1" <"$BATS_TEST_TMPDIR/err")" = "$(sf-run -q -m "$m" -p "$t1"$'\n' -n 0 --verbose-prompt 2>&1 >/dev/null | ids_of prompt)" ]
	[ "$(ids_of "turn 2" <"$BATS_TEST_TMPDIR/err")" = "$(sf-run -q -m "$m" -p "$t2"$'\n' -n 0 --verbose-prompt 2>&1 >/dev/null | ids_of prompt | cut -d' ' -f2-)" ]
}

@test "a template as a list of named ones: the default is taken" {
	local m
	m=$(chat_model "[{\"name\": \"tool_use\", \"template\": \"[INST]\"}, {\"name\": \"default\", \"template\": $CHATML}]")
	run --separate-stderr sf-run --model "$m" -cnv -n 1 -v <<<hi
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"sf-run: chat template chatml (tokenizer_config.json);"* ]]
}

@test "the KV cache carries over: each turn is fed once, and answers as the whole text would" {
	run --separate-stderr sf-run --model "$MODEL" -cnv --chat-template llama2-sys -p "Be brief." \
		-n 6 --temp 0 -v --verbose-prompt <<<$'Hello\nWho are you'
	[ "$status" -eq 0 ]
	printf '%s\n' "${stderr_lines[@]}" >"$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: turn 1: 41 tokens: "\[INST\] <<SYS>>\\nBe brief.\\n<</SYS>>\\n\\nHello \[/INST\]"' "$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: turn 2: 16 tokens: "</s>\[INST\] Who are you \[/INST\]"' "$BATS_TEST_TMPDIR/err"
	[ "$(ids_of "turn 2" <"$BATS_TEST_TMPDIR/err")" = "2 452 689 964 962 992 859 939 397 365 452 995 689 964 962 992 " ]
	# 41 + 6 positions, then 16 + 6 more: nothing fed twice
	grep -qx 'sf-run: answer 1: 6 tokens, stopped: -n 6 reached; 47 of 1024 positions used' "$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: answer 2: 6 tokens, stopped: -n 6 reached; 69 of 1024 positions used' "$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: stopped: end of input; context 1024 positions' "$BATS_TEST_TMPDIR/err"
	[[ "$(tail -n 1 "$BATS_TEST_TMPDIR/err")" == "sf-run: prompt 57 tokens, "*"; decode 12 tokens, "* ]]
	# the second answer is the greedy continuation of the whole exchange
	[ "${#lines[@]}" -eq 2 ]
	local answers=$output whole
	whole=$(printf '[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHello [/INST]%s</s>[INST] Who are you [/INST]' "${lines[0]}")
	run --separate-stderr sf-run -q --model "$MODEL" -p "$whole" -n 6 --temp 0
	[ "${output# }" = "${answers#*$'\n'}" ]
	# the same from prompts cut in passes of 3 tokens
	run --separate-stderr sf-run -q --model "$MODEL" -cnv --chat-template llama2-sys -p "Be brief." \
		-n 6 --temp 0 -b 3 <<<$'Hello\nWho are you'
	[ "$output" = "$answers" ]
}

@test "a turn per line: a trailing backslash goes on, blank lines are no turn, one answer line each" {
	run --separate-stderr sf-run --model "$MODEL" -cnv --chat-template chatml -n 2 --temp 0 -v \
		--verbose-prompt <<<$'Hello\\\nthere\n\n   \nBye'
	[ "$status" -eq 0 ]
	printf '%s\n' "${stderr_lines[@]}" >"$BATS_TEST_TMPDIR/err"
	grep -q '^sf-run: turn 1: [0-9]* tokens: "<|im_start|>user\\nHello\\nthere<|im_end|>' "$BATS_TEST_TMPDIR/err"
	grep -q '^sf-run: turn 2: [0-9]* tokens: "<|im_end|>\\n<|im_start|>user\\nBye<|im_end|>' "$BATS_TEST_TMPDIR/err"
	[ "$(grep -c '^sf-run: turn ' "$BATS_TEST_TMPDIR/err")" -eq 2 ]
	[ "$(grep -c '^sf-run: answer [12]: 2 tokens, stopped: -n 2 reached' "$BATS_TEST_TMPDIR/err")" -eq 2 ]
	[ "${#lines[@]}" -eq 2 ]
}

@test "an answer stops at the template's end-of-turn token, which the next turn starts with" {
	# a tokenizer where the model's first answer token is <|im_end|>
	local m
	m=$(chat_model "$CHATML")
	jq '.added_tokens += [{"id": 12, "content": "<|im_end|>", "single_word": false, "lstrip": false,
		"rstrip": false, "normalized": false, "special": true}]' "$MODEL/tokenizer.json" >"$m/tokenizer.json"
	run --separate-stderr sf-run --model "$m" -cnv -n 3 --temp 0 -v --verbose-prompt <<<$'Hello\nWho are you'
	[ "$status" -eq 0 ]
	printf '%s\n' "${stderr_lines[@]}" >"$BATS_TEST_TMPDIR/err"
	grep -qx "sf-run: chat template chatml (tokenizer_config.json); answers end at '<|im_end|>' (token 12) or the end-of-text token" "$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: answer 1: 0 tokens, stopped: end of turn (<|im_end|>); 30 of 1024 positions used' "$BATS_TEST_TMPDIR/err"
	# (the text after an added token starts a new piece: "▁" is prepended, as
	# Hugging Face normalizes each piece between added tokens)
	[ "$(ids_of "turn 2" <"$BATS_TEST_TMPDIR/err" | cut -d' ' -f1-3)" = "12 935 13" ]
	# an empty answer is an empty line
	[ "$output" = $'\n' ] || [ "${#lines[@]}" -eq 0 ]
	[ "$(sf-run -q --model "$m" -cnv -n 3 --temp 0 <<<$'Hello\nWho are you' | wc -l)" -eq 2 ]
}

@test "gpt-oss (harmony): found by its markers; an answer ends at <|return|>, fed back as <|end|>" {
	local m
	m=$(harmony_model "<|return|>")
	run --separate-stderr sf-run --model "$m" -cnv -p "Be brief." -n 3 --temp 0 -v \
		--verbose-prompt <<<$'Hello\nWho are you'
	[ "$status" -eq 0 ]
	printf '%s\n' "${stderr_lines[@]}" >"$BATS_TEST_TMPDIR/err"
	grep -qx "sf-run: chat template gpt-oss (tokenizer_config.json); answers end at '<|return|>' (token 954) or the end-of-text token" "$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: turn 1: [0-9]* tokens: "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>Hello<|end|><|start|>assistant"' "$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: answer 1: 0 tokens, stopped: end of turn (<|return|>); [0-9]* of 1024 positions used' "$BATS_TEST_TMPDIR/err"
	grep -qx 'sf-run: turn 2: 15 tokens: "<|end|><|start|>user<|message|>Who are you<|end|><|start|>assistant"' "$BATS_TEST_TMPDIR/err"
	[ "$(ids_of "turn 2" <"$BATS_TEST_TMPDIR/err" | cut -d' ' -f1-2)" = "1021 1019" ]
}

# The model's answers begin ", a." and ", and Indian" (-n 6): with ','
# <|message|>, what follows it is a channel's text, of no name and so not
# final: the reasoning on standard error, the answers empty lines.
@test "gpt-oss (harmony): a channel's text not final goes to standard error, a line each; the answer, empty, a line" {
	local m plain
	plain=$(sf-run -q --model "$(harmony_model)" -cnv -n 6 --temp 0 <<<$'Hello\nWho are you')
	echo "plain: $plain"
	[ "${plain:0:4}" = ", a." ]
	rm -rf "$BATS_TEST_TMPDIR/model"
	m=$(harmony_model "<|message|>")
	run --separate-stderr sf-run -q --model "$m" -cnv -n 6 --temp 0 <<<$'Hello\nWho are you'
	[ "$status" -eq 0 ]
	[ "$output" = $'\n' ] || [ "${#lines[@]}" -eq 0 ]
	[ "$(sf-run -q --model "$m" -cnv -n 6 --temp 0 <<<$'Hello\nWho are you' 2>/dev/null | wc -l)" -eq 2 ]
	[ "${stderr_lines[0]}" = "a." ]
	[[ "$stderr" == *"and Indian"* ]]
}

# Starts sf-run --conversation in the background on the FIFO
# $BATS_TEST_TMPDIR/in (held open on fd $w) and waits until it polls its
# standard input for a turn (/proc/PID/syscall: poll is 7 on x86-64).
start_chat() {
	local fifo=$BATS_TEST_TMPDIR/in
	mkfifo "$fifo"
	SF_REF=1 timeout 60 env --default-signal=INT sf-run "$@" <"$fifo" >"$BATS_TEST_TMPDIR/out" \
		2>"$BATS_TEST_TMPDIR/err" &
	pid=$!
	exec {w}>"$fifo"
	wait_polling
}

wait_polling() {
	local i nr
	for i in $(seq 300); do
		run=$(pgrep -P "$pid" | head -n 1) && [ -n "$run" ] && [ -r "/proc/$run/syscall" ] &&
			read -r nr _ <"/proc/$run/syscall" && [ "$nr" = 7 ] && return 0
		sleep 0.05
	done
	exec {w}>&-
	kill "$pid" 2>/dev/null || true
	skip "cannot see sf-run polling for a turn (/proc/PID/syscall)"
}

@test "Ctrl-C during an answer stops it and the chat goes on; at the prompt it ends the run (130)" {
	local st=$BATS_TEST_TMPDIR/st.json err=$BATS_TEST_TMPDIR/err status=0 pid run w
	start_chat --model "$MODEL" -cnv --chat-template llama2 -n -1 --ignore-eos -c 1024 -t 1 \
		--temp 0 -v --stats "$st"
	# a context of 1024: the first answer lasts long enough for the
	# interrupt to land inside it on a loaded machine
	echo "Hello" >&"$w"
	until [ -s "$BATS_TEST_TMPDIR/out" ]; do sleep 0.02; done
	kill -INT "$run"
	until grep -q '^sf-run: answer 1' "$err"; do sleep 0.02; done
	echo "Bye" >&"$w"
	until grep -q '^sf-run: answer 2' "$err"; do sleep 0.02; done
	wait_polling
	kill -INT "$run"
	wait "$pid" || status=$?
	exec {w}>&-
	[ "$status" -eq 130 ]
	# ("1 token" when the interrupt lands right after the first)
	grep -Eq '^sf-run: answer 1: [0-9]+ tokens?, stopped: interrupted; ' "$err"
	grep -q '^sf-run: answer 2: [0-9]* tokens, stopped: context full; 1024 of 1024 positions used$' "$err"
	grep -qx 'sf-run: stopped: interrupted; context 1024 positions' "$err"
	[ "$(wc -l <"$BATS_TEST_TMPDIR/out")" -ge 2 ]
	jq -e '.mode == "conversation" and .decode_tokens > 0' "$st"
}

@test "from an image: the dense model's answers at budget 1" {
	local img=$BATS_TEST_TMPDIR/m.sfimg
	sf-pack -q --model "$MODEL" -o "$img"
	run --separate-stderr sf-run -q --model "$MODEL" -cnv --chat-template chatml -n 8 --temp 0 \
		<<<$'Hello\nWho are you'
	[ "$status" -eq 0 ]
	local dense=$output
	run --separate-stderr sf-run -q --no-direct -cnv --chat-template chatml -n 8 --temp 0 "$img" \
		<<<$'Hello\nWho are you'
	[ "$status" -eq 0 ]
	[ "$output" = "$dense" ]
	run --separate-stderr sf-run -q --no-direct -cnv -n 8 "$img" </dev/null
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $img: no chat_template in tokenizer_config.json: give --chat-template NAME" ]
}

@test "at a terminal: a one-line hint, a '> ' prompt before each turn, Ctrl-D ends" {
	printf 'Hello\n\004' | timeout 60 script -qec "sf-run --model '$MODEL' -cnv --chat-template llama2 -n 4 --temp 0" /dev/null >"$BATS_TEST_TMPDIR/tty"
	tr -d '\r' <"$BATS_TEST_TMPDIR/tty" >"$BATS_TEST_TMPDIR/t"
	grep -qx "sf-run: chatting (llama2): a turn per line, a line ending in \\\\ goes on; Ctrl-C stops an answer; Ctrl-D or Ctrl-C here ends" "$BATS_TEST_TMPDIR/t"
	[ "$(grep -c '^> ' "$BATS_TEST_TMPDIR/t")" -eq 2 ]
	grep -q "^sf-run: stopped: end of input; context 1024 positions$" "$BATS_TEST_TMPDIR/t"
}
