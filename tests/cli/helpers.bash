# Shared set-up of the bats tests: where the binaries, the embedded model
# and ../shared are (the Makefile sets SF_BIN, SF_ROOT, SF_SHARED, SF_TMP).
bats_require_minimum_version 1.5.0
SF_ROOT=${SF_ROOT:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}
SF_BIN=${SF_BIN:-$SF_ROOT/bin}
SF_SHARED=${SF_SHARED:-$SF_ROOT/../shared}
SF_FIXTURES=${SF_FIXTURES:-$SF_ROOT/build/opt/fixtures}
MODEL=$SF_ROOT/models/mix4-1m
PATH=$SF_BIN:$PATH

# Skips with a reason when ../shared is absent (CI always has it).
need_shared() {
	[ -d "$SF_SHARED/models" ] && [ -d "$SF_SHARED/data/mix4" ] ||
		skip "../shared absent ($SF_SHARED): shared models and data not checked"
}

# A writable copy of the embedded model, for tests that damage it.
copy_model() {
	local dst=$BATS_TEST_TMPDIR/model
	cp -r "$MODEL" "$dst"
	chmod -R u+w "$dst"
	echo "$dst"
}

# A copy of the embedded model (no template of its own) whose
# tokenizer_config.json has chat_template set to the JSON value $1.
chat_model() {
	local dst
	dst=$(copy_model)
	jq --argjson t "$1" '.chat_template = $t' "$MODEL/tokenizer_config.json" >"$dst/tokenizer_config.json"
	echo "$dst"
}

# A copy of the embedded model with gpt-oss's harmony template and its
# markers as tokens 1019-1022, and token 954 (',', the model's first
# answer token) the marker $1 if given.
harmony_model() {
	local m id
	m=$(chat_model '"{{- \"<|start|>user<|message|>\" + message.content + \"<|end|>\" }}{{- \"<|start|>assistant<|channel|>final<|message|>\" + message.content }}"')
	cp "$MODEL/tokenizer.json" "$m/tokenizer.json"
	for id in "1019 <|start|>" "1020 <|message|>" "1021 <|end|>" "1022 <|channel|>" ${1:+"954 $1"}; do
		jq --argjson id "${id%% *}" --arg c "${id#* }" '.added_tokens |= map(select(.content != $c))
			| .added_tokens += [{"id": $id, "content": $c, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true}]' "$m/tokenizer.json" \
			>"$BATS_TEST_TMPDIR/t.json"
		mv "$BATS_TEST_TMPDIR/t.json" "$m/tokenizer.json"
	done
	echo "$m"
}

# Perplexity of MODEL (a shared model) on GENRE's test split within 0.5%
# of its reference.json, 16,384 tokens in windows of 256 as PyTorch scored.
check_ppl() {
	local model=$1 genre=$2 want got
	need_shared
	want=$(jq ".perplexity.$genre.ppl" "$SF_SHARED/models/$model/reference.json")
	run --separate-stderr sf-run --model "$SF_SHARED/models/$model" \
		--ppl "$SF_SHARED/data/mix4/$genre.test.txt" --max-tokens 16384 --window 256
	[ "$status" -eq 0 ]
	got=$(echo "$output" | jq .ppl)
	[ "$(echo "$output" | jq .tokens)" = 16383 ]
	echo "$model $genre: ppl $got, reference $want"
	jq -n --argjson g "$got" --argjson w "$want" -e '(($g - $w) / $w | fabs) < 0.005'
}

# Runs a command with standard output on /dev/full: exit 1 and the one
# line want on stderr (a write error reported once, not twice).
stdout_full_once() {
	local want=$1
	shift
	[ -w /dev/full ] || skip "no /dev/full"
	run --separate-stderr sh -c '"$@" >/dev/full' _ "$@"
	[ "$status" -eq 1 ]
	[ "$stderr" = "$want" ]
}

# Whether sf-run reads IMAGE with O_DIRECT (tmpfs refuses it): in
# setup_file, sets DIRECT to 1 or 0, the reason in $D/direct.err; a
# test that needs it starts with need_direct.
probe_direct() {
	export DIRECT=1
	"$SF_BIN/sf-run" -p x -n 1 --temp 0 -q "$1" > /dev/null 2> "$D/direct.err" || DIRECT=0
}

need_direct() {
	[ "$DIRECT" = 1 ] || skip "O_DIRECT refused where the images are ($D): $(cat "$D/direct.err")"
}

# Whether sf-run reads IMAGE through io_uring: in setup_file, sets URING
# to 1 or 0. qemu-user (make check ARCH=arm64) does not pass io_uring
# through, and sf-run falls back to pread; a test of the ring's own
# figures starts with need_uring.
probe_uring() {
	export URING=0
	if "$SF_BIN/sf-run" -p x -n 1 --temp 0 -q -v "$1" 2>&1 >/dev/null | grep -q "reads: io_uring"; then
		URING=1
	fi
}

need_uring() {
	[ "$URING" = 1 ] || skip "io_uring unavailable here (under qemu-user, say): sf-run reads with its pread fallback"
}

# Under qemu-user (make check ARCH=arm64 sets SF_EXEC) a command cannot
# execute itself again through /proc/self/exe (sf-pack --dry-run's --info):
# without binfmt_misc the kernel does not run an aarch64 binary.
need_self_exec() {
	[ -z "${SF_EXEC:-}" ] || skip "runs itself again, which $SF_EXEC cannot without binfmt_misc"
}

# Resident-set figures are the program's own only without the sanitizers,
# whose shadow memory is part of the resident set.
need_plain_build() {
	if ldd "$SF_BIN/sf-run" | grep -q libasan; then
		skip "built with the sanitizers: their shadow memory is part of the resident set"
	fi
}

# setup_file's directory D for NAME's files, under $SF_TMP (a disk, where
# O_DIRECT works), with an XDG cache of its own: no device file unless a
# test stores one.
file_scratch() {
	local base=${SF_TMP:-$BATS_FILE_TMPDIR}
	mkdir -p "$base"
	D=$(mktemp -d "$base/$1.XXXXXX")
	export D XDG_CACHE_HOME=$D/xdg
}
