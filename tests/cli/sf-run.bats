#!/usr/bin/env bats
# sf-run --model: the dense decoder, against reference.json and on bad input.

load helpers

ref() { jq -r "$1" "$MODEL/reference.json"; }

@test "--help prints usage with an example and exits 0" {
	run sf-run --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"Usage: sf-run --model MODEL"* ]]
	[[ "$output" == *"Examples:"* ]]
}

@test "--version prints the version" {
	run sf-run --version
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^sf-run\ \(sparseflash\)\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
}

@test "an unknown option is a usage error" {
	run sf-run --frobnicate
	[ "$status" -eq 2 ]
	[ "${lines[-1]}" = "Try 'sf-run --help'." ]
}

@test "option errors name the command, not the path it was run by" {
	run --separate-stderr "$SF_BIN/sf-run" --frobnicate
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: unrecognized option '--frobnicate'" ]
	run --separate-stderr "$SF_BIN/sf-run" -x
	[ "${stderr_lines[0]}" = "sf-run: invalid option '-x'" ]
	run --separate-stderr "$SF_BIN/sf-run" --model
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: option '--model' requires a value" ]
	[ "${stderr_lines[1]}" = "Try 'sf-run --help'." ]
	run --separate-stderr "$SF_BIN/sf-run" --echo=yes
	[ "${stderr_lines[0]}" = "sf-run: option '--echo' takes no value" ]
}

@test "sparse decoding options need an IMAGE, whatever their place in the table" {
	local opt
	for opt in "--budget 0.5" "--qd 4" "--simulate" "--free-riders" "--dense-layers 0"; do
		run --separate-stderr sf-run --model "$MODEL" -p x $opt
		[ "$status" -eq 2 ]
		[ "${stderr_lines[0]}" = "sf-run: sparse decoding options need an IMAGE, not --model" ]
	done
}

@test "a missing --model is a usage error" {
	run sf-run -p hello
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --model MODEL is required" ]
}

@test "a number out of range is a usage error naming the range" {
	run sf-run --model "$MODEL" --top-p 1.5
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --top-p: 1.5 is out of range: expected 0..1" ]
}

@test "a value that is not a number is a usage error" {
	run sf-run --model "$MODEL" -t two
	[ "$status" -eq 2 ]
	[ "${lines[0]}" = "sf-run: --threads: 'two' is not a whole number" ]
}

@test "greedy generation gives reference.json's continuation" {
	local prompt text
	prompt=$(ref '.encode[0].text')
	text=$(ref '.greedy[0].text')
	run --separate-stderr sf-run --model "$MODEL" -p "$prompt" -n 32 --temp 0
	[ "$status" -eq 0 ]
	[ "$output" = "${text#"$prompt"}" ]
	[[ "$stderr" == *"decode 32 tokens"* ]]
}

@test "--echo prints the prompt before the continuation" {
	local prompt text
	prompt=$(ref '.encode[1].text')
	text=$(ref '.greedy[1].text')
	run --separate-stderr sf-run --model "$MODEL" -p "$prompt" -n 32 --temp 0 --echo
	[ "$status" -eq 0 ]
	[ "$output" = "$text" ]
}

@test "the prompt can come from standard input" {
	local prompt text
	prompt=$(ref '.encode[2].text')
	text=$(ref '.greedy[2].text')
	run --separate-stderr sh -c 'echo "$1" | sf-run --model "$2" -n 32 --temp 0 -q' _ "$prompt" "$MODEL"
	[ "$status" -eq 0 ]
	[ "$output" = "${text#"$prompt"}" ]
}

@test "one and two threads give the same text" {
	run sf-run --model "$MODEL" -p "The program" -n 40 --seed 7 -t 1 -q
	local one=$output
	run sf-run --model "$MODEL" -p "The program" -n 40 --seed 7 -t 2 -q
	[ "$status" -eq 0 ]
	[ "$output" = "$one" ]
}

@test "SF_ISA picks the kernels' level (-v names it), the greedy text that of any other; an unknown level or one the CPU lacks: one line, exit 2" {
	local best level ran=
	best=$(sf-run --model "$MODEL" -p "The program" -n 24 --temp 0 -q)
	for level in ref avx2 avx512 neon dotprod i8mm; do
		run --separate-stderr env SF_ISA=$level sf-run --model "$MODEL" -p "The program" -n 24 --temp 0 -v
		if [ "$status" -eq 2 ]; then	# not on this CPU
			[ "$stderr" = "sf-run: SF_ISA: '$level' is not a level this CPU runs (ref, avx2, avx512; neon, dotprod, i8mm on aarch64)" ]
			continue
		fi
		[ "$status" -eq 0 ]
		[[ "$stderr" == *"; kernels $level, "* ]]
		[ "$output" = "$best" ]
		ran="$ran $level"
	done
	echo "levels run:$ran"
	[[ "$ran" == " ref "* ]]	# the reference and at least one SIMD level
	run --separate-stderr env SF_ISA=sse2 sf-run --model "$MODEL" -p x
	[ "$status" -eq 2 ]
	[ "$stderr" = "sf-run: SF_ISA: 'sse2' is not a level this CPU runs (ref, avx2, avx512; neon, dotprod, i8mm on aarch64)" ]
}

@test "the same seed gives the same sample, another seed another" {
	run sf-run --model "$MODEL" -p "A man" -n 48 --temp 1 --seed 1 -q
	local first=$output
	run sf-run --model "$MODEL" -p "A man" -n 48 --temp 1 --seed 1 -q
	[ "$output" = "$first" ]
	run sf-run --model "$MODEL" -p "A man" -n 48 --temp 1 --seed 2 -q
	[ "$output" != "$first" ]
}

@test "--stats writes timings that jq reads" {
	run sf-run --model "$MODEL" -p "The" -n 20 --ignore-eos -q --stats "$BATS_TEST_TMPDIR/s.json"
	[ "$status" -eq 0 ]
	[ "$(jq .decode_tokens "$BATS_TEST_TMPDIR/s.json")" = 20 ]
	[ "$(jq '.decode_tokens_per_second > 0' "$BATS_TEST_TMPDIR/s.json")" = true ]
	# one busy share per thread, each a fraction of the decode time
	run sf-run --model "$MODEL" -p "The" -n 20 --ignore-eos -q -t 3 --stats "$BATS_TEST_TMPDIR/s.json"
	[ "$status" -eq 0 ]
	[ "$(jq '.decode_busy | length' "$BATS_TEST_TMPDIR/s.json")" = 3 ]
	[ "$(jq '[.decode_busy[] | . > 0 and . <= 1] | all' "$BATS_TEST_TMPDIR/s.json")" = true ]
}

@test "a prompt longer than the context is refused" {
	run --separate-stderr sf-run --model "$MODEL" -c 4 -p "In the beginning God created"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: prompt: 12 tokens do not fit the context of 4 positions" ]
	[ -z "$output" ]
	run --separate-stderr sf-run --model "$MODEL" -c 1 -p "In the beginning God created"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: prompt: 12 tokens do not fit the context of 1 position" ]
}

@test "a context beyond the model's is refused" {
	run --separate-stderr sf-run --model "$MODEL" -c 4096 -p hi
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: --ctx-size 4096: the model supports at most 1024 positions" ]
	# --ppl's context is its window and the token before it
	printf 'In the beginning God created the heaven and the earth.\n' > "$BATS_TEST_TMPDIR/t.txt"
	run --separate-stderr sf-run --model "$MODEL" --ppl "$BATS_TEST_TMPDIR/t.txt" --window 1024
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: --window 1024: a window takes 1025 positions, the model supports at most 1024" ]
}

@test "a write error on standard output is reported" {
	run sh -c 'sf-run --model "$1" -p hi -n 8 --ignore-eos -q > /dev/full' _ "$MODEL"
	[ "$status" -eq 1 ]
	[[ "$output" == "sf-run: write error on standard output"* ]]
}

@test "a missing config.json is a data error naming the file" {
	local m; m=$(copy_model)
	rm "$m/config.json"
	run --separate-stderr sf-run --model "$m" -p hi
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-run: $m/config.json: "*"No such file or directory" ]]
	[ -z "$output" ]
}

@test "a model path that is not there is named itself (not as a directory's config.json)" {
	run --separate-stderr sf-run --model "$BATS_TEST_TMPDIR/missing.gguf" -p hi
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $BATS_TEST_TMPDIR/missing.gguf: No such file or directory" ]
	[ -z "$output" ]
}

@test "a malformed config.json is a data error" {
	local m; m=$(copy_model)
	printf '{"hidden_size": 128,' > "$m/config.json"
	run --separate-stderr sf-run --model "$m" -p hi
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-run: $m/config.json: "* ]]
	[ "${#stderr_lines[@]}" -eq 1 ]
}

@test "an unknown architecture is refused by name" {
	local m; m=$(copy_model)
	jq '.architectures = ["GPT2LMHeadModel"]' "$MODEL/config.json" > "$m/config.json"
	run --separate-stderr sf-run --model "$m" -p hi
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-run: $m/config.json: "*"GPT2LMHeadModel"* ]]
}

@test "a truncated safetensors file is a data error" {
	local m; m=$(copy_model)
	truncate -s 100000 "$m/model.safetensors"
	run --separate-stderr sf-run --model "$m" -p hi
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-run: $m/model.safetensors: "* ]]
	[ "${#stderr_lines[@]}" -eq 1 ]
}

@test "a safetensors header not padded to 8 (tensors at odd bytes): the same text, SF_REF=1 too" {
	local m f hl hdr n ref want LC_ALL=C
	m=$(copy_model)
	f=$MODEL/model.safetensors
	hl=$(od -An -tu8 -N8 "$f" | tr -d ' ')
	# the header without its padding, one space back when that leaves it even
	hdr=$(dd if="$f" bs=4096 iflag=skip_bytes,count_bytes skip=8 count="$hl" status=none |
		sed 's/ *$//')
	[ $((${#hdr} % 2)) -eq 1 ] || hdr="$hdr "
	n=${#hdr}
	{ printf "$(printf '\\x%02x' $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)))"
	  printf '\0\0\0\0\0'; printf '%s' "$hdr"; tail -c +$((9 + hl)) "$f"; } > "$m/model.safetensors"
	[ "$(od -An -tu8 -N8 "$m/model.safetensors" | tr -d ' ')" -eq "$n" ]
	want=$(sf-run --model "$MODEL" -p "In the" -n 8 --temp 0 2>/dev/null)
	for ref in 0 1; do
		SF_REF=$ref run --separate-stderr sf-run --model "$m" -p "In the" -n 8 --temp 0
		[ "$status" -eq 0 ]
		[ "$output" = "$want" ]
	done
}

@test "a malformed tokenizer.json is a data error" {
	local m; m=$(copy_model)
	head -c 5000 "$MODEL/tokenizer.json" > "$m/tokenizer.json"
	run --separate-stderr sf-run --model "$m" -p hi
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-run: $m/tokenizer.json: "* ]]
	[ "${#stderr_lines[@]}" -eq 1 ]
}

@test "--ppl on a missing file is a data error" {
	run --separate-stderr sf-run --model "$MODEL" --ppl "$BATS_TEST_TMPDIR/none.txt"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $BATS_TEST_TMPDIR/none.txt: No such file or directory" ]
	[ -z "$output" ]
}

@test "--ppl reads documents from standard input" {
	run --separate-stderr sh -c 'printf "In the beginning God created the heaven.\n\nAnd the earth.\n" |
		sf-run --model "$1" --ppl - --window 8' _ "$MODEL"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq .documents)" = 2 ]
	[ "$(echo "$output" | jq '.ppl > 1')" = true ]
}

# Perplexity within 0.5% of reference.json (check_ppl): one genre here,
# every genre of both models in tests/cli-full/reference.bats.

@test "mix4-1m perplexity on kjv matches reference.json" { check_ppl mix4-1m kjv; }

@test "-b: the prompt and --ppl in batches give the one-token output exactly" {
	need_shared
	local m=$SF_SHARED/models/mix4-5m text ppl
	text=$(sf-run --model "$m" -p "In the beginning God created the heaven and the earth. And the earth" \
		-n 16 --temp 0 -b 1 2>/dev/null)
	for b in 2 7 64; do
		[ "$(sf-run --model "$m" -p "In the beginning God created the heaven and the earth. And the earth" \
			-n 16 --temp 0 -b $b 2>/dev/null)" = "$text" ]
	done
	ppl=$(sf-run --model "$m" --ppl "$SF_SHARED/data/mix4/man.test.txt" --max-tokens 1200 -b 1 | jq -c .)
	for b in 3 64 300; do
		[ "$(sf-run --model "$m" --ppl "$SF_SHARED/data/mix4/man.test.txt" --max-tokens 1200 \
			-b $b | jq -c .)" = "$ppl" ]
	done
}

@test "-b 0 and -b beyond 4096 are usage errors" {
	run --separate-stderr sf-run --model "$MODEL" -p hi -b 0
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: --batch-size: 0 is out of range: expected 1..4096" ]
	run --separate-stderr sf-run --model "$MODEL" -p hi -b 4097
	[ "$status" -eq 2 ]
}

@test "the text ends with a newline; stderr says why it stopped and the context, no blank line" {
	run --separate-stderr sf-run --model "$MODEL" -p "In the beginning" -n 8 --temp 0
	[ "$status" -eq 0 ]
	[ "$(sf-run -q --model "$MODEL" -p "In the beginning" -n 8 --temp 0 | tail -c 1 | od -An -c | tr -d ' ')" = '\n' ]
	[ "${#stderr_lines[@]}" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: stopped: -n 8 reached; context 1024 positions" ]
	[[ "${stderr_lines[1]}" =~ ^sf-run:\ prompt\ [0-9]+\ tokens,\ [0-9.]+\ tok/s\;\ decode\ 8\ tokens,\ [0-9.]+\ tok/s$ ]]
	run --separate-stderr sf-run --model "$MODEL" -p "In the" -n -1 --ignore-eos --temp 0 -c 4
	[ "${stderr_lines[0]}" = "sf-run: stopped: context full; context 4 positions" ]
	run --separate-stderr sf-run --model "$MODEL" -p "In the" -n 0 --temp 0
	[ "$output" = "" ]
	[ "${stderr_lines[0]}" = "sf-run: stopped: -n 0 reached; context 1024 positions" ]
	run --separate-stderr sf-run -q --model "$MODEL" -p "In the" -n 4
	[ "$stderr" = "" ]
}

@test "-n 0 runs the prompt, as llama.cpp's does: its time and the KV cache's tokens are real" {
	local prompt="In the beginning God created the heaven and the earth. And the earth was without form"
	run --separate-stderr sf-run --model "$MODEL" -p "$prompt" -n 0 --bench
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq '.prompt_tokens > 10 and .prompt_seconds > 1e-4 and .pp < 1e6')" = true ]
	# a prompt that does not fit is refused whatever -n is
	run --separate-stderr sf-run --model "$MODEL" -p "$prompt" -n 0 -c 4
	[ "$status" -ne 0 ]
}

@test "-c 4 with a 3-token prompt: one decode step, no nonsense rate, \"1 token\"" {
	run --separate-stderr sf-run --model "$MODEL" -p "In the" -n 1 --temp 0 -c 4
	[ "$status" -eq 0 ]
	[[ "${stderr_lines[1]}" =~ \;\ decode\ 1\ token$ ]]
	run --separate-stderr sf-run --model "$MODEL" -p "In the" -n 2 --temp 0
	[[ "${stderr_lines[1]}" =~ \;\ decode\ 2\ tokens,\ [0-9.]+\ tok/s$ ]]
}

@test "Ctrl-C: the text so far, the timings and --stats, then exit 130; no temporary left" {
	local out=$BATS_TEST_TMPDIR/out st=$BATS_TEST_TMPDIR/st.json status=0
	SF_REF=1 env --default-signal=INT sf-run --model "$MODEL" -p "In the" -n -1 --ignore-eos \
		-t 1 --temp 0 --stats "$st" >"$out" 2>"$BATS_TEST_TMPDIR/err" &
	local pid=$!
	until [ -s "$out" ]; do sleep 0.02; done
	kill -INT $pid
	wait $pid || status=$?
	[ "$status" -eq 130 ]
	mapfile -t err <"$BATS_TEST_TMPDIR/err"
	[ "${err[0]}" = "sf-run: stopped: interrupted; context 1024 positions" ]
	[[ "${err[1]}" =~ ^sf-run:\ prompt\ 3\ tokens ]]
	[ "$(tail -c 1 "$out" | od -An -c | tr -d ' ')" = '\n' ]
	jq -e '.decode_tokens > 0 and .decode_tokens < 1022' "$st"
	[ -z "$(compgen -G "$st.tmp.*")" ]
}

@test "--stats - : JSON alone on standard output, the text on standard error" {
	local T=$BATS_TEST_TMPDIR
	sf-run --model "$MODEL" -p "In the" -n 4 --temp 0 --stats - >"$T/out" 2>"$T/err"
	[ "$(jq -r .decode_tokens "$T/out")" = 4 ]
	sf-run -q --model "$MODEL" -p "In the" -n 4 --temp 0 >"$T/text"
	[ "$(head -n 1 "$T/err")" = "$(cat "$T/text")" ]
	[[ "$(sed -n 2p "$T/err")" == "sf-run: stopped: "* ]]
	run --separate-stderr sf-run --model "$MODEL" --ppl "$MODEL/README.md" --window 16 --stats -
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq -s -c 'map(.mode // "result")')" = '["result","ppl"]' ]
}

@test "--stats FILE that cannot be written: the reason, nothing left behind" {
	run --separate-stderr sf-run -q --model "$MODEL" -p "In the" -n 4 --stats "$BATS_TEST_TMPDIR/none/s.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "sf-run: $BATS_TEST_TMPDIR/none/s.json: No such file or directory" ]
	run --separate-stderr sf-run -q --model "$MODEL" -p "In the" -n 4 --stats "$BATS_TEST_TMPDIR"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "sf-run: $BATS_TEST_TMPDIR: "* ]]
	[ -z "$(compgen -G "$BATS_TEST_TMPDIR/*.tmp.*")" ]
}

@test "a write error on standard output is reported once" {
	stdout_full_once "sf-run: write error on standard output: No space left on device" \
		sf-run -q --model "$MODEL" -p "In the" -n 4
}

@test "--ppl --progress into a log: lines with rate, ETA and ppl, the last without ETA" {
	run --separate-stderr sf-run --model "$MODEL" --ppl "$MODEL/README.md" --window 16 --progress
	[ "$status" -eq 0 ]
	[[ "$stderr" != *$'\r'* ]]
	[[ "${stderr_lines[-1]}" =~ ^sf-run:\ [0-9]+\ tokens\ in\ [0-9.]+\ s,\ [0-9.e+]+\ tokens/s\;\ ppl\ [0-9.]+$ ]]
}

@test "a prompt typed at a terminal: a one-line hint, and the first Ctrl-D ends it" {
	printf 'In the\004' | timeout 60 script -qec "sf-run --model '$MODEL' -n 4 --temp 0" /dev/null >"$BATS_TEST_TMPDIR/tty"
	grep -q "sf-run: reading the prompt from the terminal; end it with Ctrl-D (or give -p TEXT or -f FILE)" "$BATS_TEST_TMPDIR/tty"
	grep -q "^sf-run: stopped: -n 4 reached" "$BATS_TEST_TMPDIR/tty"
}

@test "-f FILE: the prompt from a file, as -p gives it" {
	printf 'In the beginning\n' >"$BATS_TEST_TMPDIR/p.txt"
	run --separate-stderr sf-run -q --model "$MODEL" -f "$BATS_TEST_TMPDIR/p.txt" -n 8 --temp 0
	[ "$status" -eq 0 ]
	[ "$output" = "$(sf-run -q --model "$MODEL" -p "In the beginning" -n 8 --temp 0)" ]
	run --separate-stderr sf-run --model "$MODEL" -f "$BATS_TEST_TMPDIR/p.txt" -p x
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: --prompt and --file cannot be combined" ]
}

@test "sampling options: --top-k 1 is greedy, --repeat-penalty 1 is none, a seed repeats, -s is --seed" {
	local greedy sampled
	greedy=$(sf-run -q --model "$MODEL" -p "In the beginning" -n 24 --temp 0)
	[ "$(sf-run -q --model "$MODEL" -p "In the beginning" -n 24 --temp 0.8 --top-k 1)" = "$greedy" ]
	sampled=$(sf-run -q --model "$MODEL" -p "In the beginning" -n 24 --seed 7)
	[ "$sampled" != "$greedy" ]
	[ "$(sf-run -q --model "$MODEL" -p "In the beginning" -n 24 -s 7)" = "$sampled" ]
	[ "$(sf-run -q --model "$MODEL" -p "In the beginning" -n 24 -s 7 --repeat-penalty 1)" = "$sampled" ]
	[ "$(sf-run -q --model "$MODEL" -p "In the beginning" -n 24 -s 7 --top-k 0 --min-p 0)" = "$sampled" ]
	[ "$(sf-run -q --model "$MODEL" -p "In the beginning" -n 24 --temp 0 --repeat-penalty 1.5)" != "$greedy" ]
	[ "$(sf-run -q --model "$MODEL" -p "In the beginning" -n 24 -s 3 --min-p 0.2)" = \
	  "$(sf-run -q --model "$MODEL" -p "In the beginning" -n 24 -s 3 --min-p 0.2)" ]
}

@test "llama.cpp options not supported are refused by name" {
	run --separate-stderr sf-run -ngl 99 --model "$MODEL" -p hi
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: -ngl: llama.cpp's option is not supported: sparseflash runs on the CPU only" ]
	[ "${stderr_lines[1]}" = "Try 'sf-run --help'." ]
	# as an option's value it is just text
	run --separate-stderr sf-run -q --model "$MODEL" -p -ngl -n 2
	[ "$status" -eq 0 ]
	# the common llama.cpp options, each refused with its reason
	for o in -fa -sm -ub -tb -np --mlock --no-mmap --numa --mirostat --typical \
		--presence-penalty --frequency-penalty --rope-freq-base --lora -hf -md --grammar -j \
		--prompt-cache --keep -e -r --in-prefix -sys --jinja --log-file --color \
		--no-display-prompt -sp --no-warmup --no-context-shift -l -dt --override-kv -C --prio; do
		run --separate-stderr sf-run --model "$MODEL" "$o"
		[ "$status" -eq 2 ]
		[[ "${stderr_lines[0]}" == "sf-run: $o: llama.cpp's option is not supported: "?* ]]
	done
}

@test "every command refuses llama.cpp's options by name, keeping its own" {
	for c in sf-profile sf-coact sf-place sf-encode sf-pack; do
		run --separate-stderr "$c" -ngl 99
		[ "$status" -eq 2 ]
		[ "${stderr_lines[0]}" = "$c: -ngl: llama.cpp's option is not supported: sparseflash runs on the CPU only" ]
		run --separate-stderr "$c" --no-mmap
		[ "${stderr_lines[0]}" = "$c: --no-mmap: llama.cpp's option is not supported: --model maps the weights; an IMAGE reads them from flash" ]
	done
	# a command's own option of a refused name keeps its meaning: sf-place's -l (--layers)
	run --separate-stderr sf-place -l 0 --method identity --model "$MODEL" -o /dev/null
	[[ "$stderr" != *"llama.cpp"* ]]
	# sf-profile's -c is its own (the context length), not llama.cpp's refusal
	run --separate-stderr sf-profile -m "$MODEL" -c 4096 -
	[ "$stderr" = "sf-profile: --ctx-size 4096: the model supports at most 1024 positions" ]
}

@test "-v: a model summary with parameters, dtype, context, memory and threads" {
	run --separate-stderr sf-run -v -t 1 --model "$MODEL" -p hi -n 2 -c 64
	[ "$status" -eq 0 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ .*/mix4-1m:\ LlamaForCausalLM,\ 918656\ parameters,\ BF16,\ 4\ layers,\ dim\ 128,\ context\ 64\ of\ 1024,\ fingerprint\ [0-9a-f]{16}\;\ kernels\ [a-z0-9]+,\ 1\ threads$ ]]
	[ "${stderr_lines[1]}" = "sf-run: memory: resident 1837312 bytes (the whole model, mapped), flash 0" ]
}

@test "--bench with --model: llama-bench's pp and tg as JSON, no text" {
	run --separate-stderr sf-run --model "$MODEL" -p "In the beginning God created" -n 8 -b 4 --bench
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.pp > 0 and .tg > 0 and .batch == 4 and .decode_tokens == 8'
}

@test "an empty --model, --stats or --file is a usage error" {
	run --separate-stderr sf-run --model "" -p x
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: --model: an empty name" ]
	run --separate-stderr sf-run --model "$MODEL" -p x --stats ""
	[ "$status" -eq 2 ]
	[ "${stderr_lines[0]}" = "sf-run: --stats: an empty name" ]
}

@test "--verbose-prompt: the prompt and its tokens, those of reference.json, as llama.cpp lists them" {
	local prompt
	prompt=$(ref '.encode[0].text')
	run --separate-stderr sf-run --model "$MODEL" -p "$prompt" -n 0 --verbose-prompt
	[ "$status" -eq 0 ]
	[ "${stderr_lines[0]}" = "sf-run: prompt: 12 tokens: \"$prompt\"" ]
	[ "${stderr_lines[1]}" = "     1 -> '<s>'" ]
	[ "${stderr_lines[2]}" = "   743 -> '▁In'" ]
	[ "$(printf '%s\n' "${stderr_lines[@]:1:12}" | awk '{ printf "%s%s", (NR > 1 ? "," : ""), $1 }')" = "$(ref '.encode[0].ids | join(",")')" ]
}

@test "a prompt's last character, held back for the bytes that may follow, is not given out with the text" {
	# é is two byte-fallback tokens in mix4-1m's vocabulary
	run --separate-stderr sf-run --model "$MODEL" -p "un café" -n 0
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	local echoed generated
	echoed=$(sf-run --model "$MODEL" -p "un café" -n 8 --temp 0 --echo 2>/dev/null)
	generated=$(sf-run --model "$MODEL" -p "un café" -n 8 --temp 0 2>/dev/null)
	[ -n "$generated" ] && [ "$echoed" = "un café$generated" ]
}
