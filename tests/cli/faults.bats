#!/usr/bin/env bats
# I/O faults (issue 9): sf-pack out of space (a 1 MiB tmpfs, where the
# machine lets us mount one) or past the file size limit (RLIMIT_FSIZE with
# SIGXFSZ ignored: write fails with EFBIG, no privilege needed), and images
# truncated before sf-run or sf-pack open them. Each gives one clear line,
# exit 1, no output file and nothing presented as a result; an image
# truncated under a running sf-run (its header and resident regions were
# once mapped, and it died of SIGBUS); a model or .sfq file, which stays
# mapped, cut under a running sf-run, sf-profile, sf-encode or sf-pack (the
# SIGBUS guard names the file). Injected read errors and short reads of
# sf-run's io_uring layer (SF_FAULT) are in sf-run-image.bats; the library
# side of a file truncated while open in tests/unit/test_faults.c, the
# SIGBUS guard's own tests in tests/unit/test_guard.c.

load helpers

setup_file() {
	export D=$BATS_FILE_TMPDIR
	"$SF_BIN/sf-pack" --model "$MODEL" -o "$D/plain.sfimg"
	"$SF_BIN/sf-encode" --model "$MODEL" --method scalar -t 2 -o "$D/codes.sfq"
	printf 'In the beginning God created the heaven and the earth.\n' >"$D/doc.txt"
	"$SF_BIN/sf-encode" --model "$MODEL" --calibrate --codes "$D/codes.sfq" -t 2 \
		--corpus "$D/doc.txt" --budgets 0.5 --calib-tokens 8 --window 8 -o "$D/calib.json"
}

teardown() {
	if [ -n "${MNT:-}" ] && mountpoint -q "$MNT"; then umount "$MNT"; fi
}

# no file and no temporary left in a directory
empty_dir() {
	[ -z "$(ls -A "$1")" ]
}

@test "sf-pack out of space on a small filesystem: one line, exit 1, nothing left" {
	MNT=$BATS_TEST_TMPDIR/mnt
	mkdir -p "$MNT"
	mount -t tmpfs -o size=1m tmpfs "$MNT" 2>/dev/null ||
		skip "cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)"
	run --separate-stderr sf-pack --model "$MODEL" -o "$MNT/x.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $MNT/x.sfimg: write: No space left on device" ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ -z "$output" ]
	empty_dir "$MNT"
}

@test "sf-pack past the file size limit: one line, exit 1, nothing left" {
	mkdir "$BATS_TEST_TMPDIR/out"
	run --separate-stderr bash -c 'trap "" XFSZ; ulimit -f 512; exec "$@"' _ \
		sf-pack --model "$MODEL" -o "$BATS_TEST_TMPDIR/out/x.sfimg"
	[ "$status" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-pack: $BATS_TEST_TMPDIR/out/x.sfimg: write: File too large" ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	empty_dir "$BATS_TEST_TMPDIR/out"
}

@test "sf-run on a truncated image: one line, exit 1, no text" {
	head -c 1000000 "$D/plain.sfimg" >"$D/short.sfimg"
	run --separate-stderr sf-run -p "In the beginning" -n 4 --temp 0 "$D/short.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ $D/short\.sfimg:\ region\ \'layer\ [0-9]+\ [a-z_]+\ (top|mid)\'\ \(bytes\ [0-9]+\.\.[0-9]+\)\ extends\ past\ the\ end\ of\ the\ file\ \(1000000\ bytes\):\ truncated\?$ ]]
	[ -z "$output" ]
	run --separate-stderr sf-pack --info "$D/short.sfimg"
	[ "$status" -eq 1 ]
	[ -z "$output" ]
}

@test "sf-run on an image cut inside its header: one line, exit 1" {
	head -c 100 "$D/plain.sfimg" >"$D/head.sfimg"
	run --separate-stderr sf-run -p "In the beginning" -n 4 --temp 0 "$D/head.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ $D/head\.sfimg:\ header\ of\ [0-9]+\ bytes\ in\ a\ file\ of\ 100:\ truncated\?$ ]]
	[ -z "$output" ]
}

# Runs "$@" in the background (stdin from the FIFO $BATS_TEST_TMPDIR/prompt)
# and, once its main thread waits in read(2) on fd 0, runs ACTION FILE ARG
# and sends the prompt; status, stderr_lines and output as run sets them.
# Skips where /proc/PID/syscall cannot be read.
while_prompting() {
	local action=$1 file=$2 arg=$3 fifo=$BATS_TEST_TMPDIR/prompt pid run i nr fd w
	shift 3
	mkfifo "$fifo"
	timeout 60 "$@" <"$fifo" >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" &
	pid=$!
	exec {w}>"$fifo"	# (bats owns fd 3)
	for i in $(seq 300); do
		run=$(pgrep -P "$pid") && [ -r "/proc/$run/syscall" ] &&
			read -r nr fd _ <"/proc/$run/syscall" && [ "$nr $fd" = "0 0x0" ] && break
		run=
		sleep 0.1
	done
	if [ -z "$run" ]; then
		exec {w}>&-
		wait "$pid" || true
		skip "cannot see $1 waiting for its prompt (/proc/PID/syscall)"
	fi
	"$action" "$file" "$arg"
	echo "In the beginning" >&"$w"
	exec {w}>&-
	status=0
	wait "$pid" || status=$?
	mapfile -t stderr_lines <"$BATS_TEST_TMPDIR/err"
	output=$(cat "$BATS_TEST_TMPDIR/out")
}

cut_to() { truncate -s "$2" "$1"; }
cut_while_prompting() { while_prompting cut_to "$@"; }

# ARG bytes of zeros written over FILE at 1 MiB, its size kept
zeros_at_1m() { dd if=/dev/zero of="$1" bs=1 seek=$((1 << 20)) count="$2" conv=notrunc status=none; }

# sf-run reads its prompt from a FIFO after opening the image: once it
# waits there, the image is cut to size, then the prompt is sent. The
# flash reads find the end of the file.
truncated_under_sf_run() {
	local img=$BATS_TEST_TMPDIR/live.sfimg
	cp "$D/plain.sfimg" "$img"
	cut_while_prompting "$img" "$1" sf-run -n 8 --temp 0 "$img"
}

@test "sf-run with its image truncated to nothing while running: one line, exit 1, no text" {
	truncated_under_sf_run 0
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ $BATS_TEST_TMPDIR/live\.sfimg:\ read\ of\ [0-9]+\ bytes\ at\ offset\ [0-9]+:\ end\ of\ file\ after\ 0\ bytes\ \(file\ is\ 0\ bytes:\ truncated\?\)$ ]]
	[ -z "$output" ]
}

@test "sf-run with its image cut inside the flash regions while running: one line, exit 1" {
	truncated_under_sf_run 1000000
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-run:\ $BATS_TEST_TMPDIR/live\.sfimg:\ read\ of\ [0-9]+\ bytes\ at\ offset\ [0-9]+:\ end\ of\ file\ after\ [0-9]+\ bytes\ \(file\ is\ 1000000\ bytes:\ truncated\?\)$ ]]
	[ -z "$output" ]
}

# --- mapped inputs cut under a running command (the SIGBUS guard)
#
# A model's safetensors files and .sfq codes stay mapped while a command
# runs; a page past the new end of a file cut short raises SIGBUS when
# touched, which killed the command without a word (exit 135). Each
# command stops on a FIFO it opens after mapping its inputs (the prompt,
# --calib, a corpus): opening the FIFO for writing returns only once the
# command has opened it for reading, so the file is cut after it was
# mapped, with no sleep involved. Under SANITIZE=1 ASan's SIGBUS handler
# (handle_sigbus=1) gives way to the one the commands install after it.

# The guard's line for prog about file.
bus_line() {
	echo "$1: $2: file changed under a running $1 (truncated?): bus error reading mapped data"
}

# Runs "$@" in the background; once it opens FIFO for reading, cuts FILE
# to SIZE bytes, lists $BATS_TEST_TMPDIR/o (the output directory) into
# $BATS_TEST_TMPDIR/at_cut and sends FEED through the FIFO; status,
# stderr_lines and output as run sets them.
cut_at_fifo() {
	local file=$1 size=$2 fifo=$3 feed=$4 pid
	shift 4
	mkdir -p "$BATS_TEST_TMPDIR/o"
	mkfifo "$fifo"
	timeout 60 "$@" >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" &
	pid=$!
	timeout 60 sh -c 'exec 3>"$1" && truncate -s "$2" "$3" && ls -A "$4" >"$5" && cat "$6" >&3' \
		_ "$fifo" "$size" "$file" "$BATS_TEST_TMPDIR/o" "$BATS_TEST_TMPDIR/at_cut" "$feed"
	status=0
	wait "$pid" || status=$?
	mapfile -t stderr_lines <"$BATS_TEST_TMPDIR/err"
	output=$(cat "$BATS_TEST_TMPDIR/out")
}

@test "sf-run --model with its model cut while it waits for the prompt: one line, exit 1, no text" {
	local m
	m=$(copy_model)
	cut_while_prompting "$m/model.safetensors" 1000000 sf-run --model "$m" -n 8 --temp 0
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ "${stderr_lines[0]}" = "$(bus_line sf-run "$m/model.safetensors")" ]
	[ -z "$output" ]
}

@test "sf-profile with its model cut while it waits for the corpus: one line, exit 1, the pending output removed" {
	local m
	m=$(copy_model)
	cut_at_fifo "$m/model.safetensors" 0 "$BATS_TEST_TMPDIR/corpus" "$D/doc.txt" \
		sf-profile -q -m "$m" "$BATS_TEST_TMPDIR/corpus" -o "$BATS_TEST_TMPDIR/o/trace.sft"
	grep -q '^trace\.sft\.tmp\.' "$BATS_TEST_TMPDIR/at_cut"	# pending when the model was cut
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ "${stderr_lines[0]}" = "$(bus_line sf-profile "$m/model.safetensors")" ]
	empty_dir "$BATS_TEST_TMPDIR/o"
}

@test "sf-encode --calibrate with its codes cut while it waits for the corpus: one line, exit 1, no output" {
	cp "$D/codes.sfq" "$BATS_TEST_TMPDIR/live.sfq"
	cut_at_fifo "$BATS_TEST_TMPDIR/live.sfq" 4096 "$BATS_TEST_TMPDIR/corpus" "$D/doc.txt" \
		sf-encode --model "$MODEL" --calibrate --codes "$BATS_TEST_TMPDIR/live.sfq" -t 2 \
		--corpus "$BATS_TEST_TMPDIR/corpus" --budgets 0.5 --calib-tokens 8 --window 8 \
		-o "$BATS_TEST_TMPDIR/o/calib.json"
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ "${stderr_lines[0]}" = "$(bus_line sf-encode "$BATS_TEST_TMPDIR/live.sfq")" ]
	empty_dir "$BATS_TEST_TMPDIR/o"
}

@test "sf-pack with its codes cut while it waits for --calib: one line, exit 1, nothing left" {
	cp "$D/codes.sfq" "$BATS_TEST_TMPDIR/live.sfq"
	cut_at_fifo "$BATS_TEST_TMPDIR/live.sfq" 0 "$BATS_TEST_TMPDIR/calib" "$D/calib.json" \
		sf-pack --model "$MODEL" --codes "$BATS_TEST_TMPDIR/live.sfq" \
		--calib "$BATS_TEST_TMPDIR/calib" -o "$BATS_TEST_TMPDIR/o/x.sfimg"
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ "${stderr_lines[0]}" = "$(bus_line sf-pack "$BATS_TEST_TMPDIR/live.sfq")" ]
	[ -z "$output" ]
	empty_dir "$BATS_TEST_TMPDIR/o"
}

@test "sf-pack with its model cut while it waits for --calib: one line, exit 1, nothing left" {
	local m
	m=$(copy_model)
	cut_at_fifo "$m/model.safetensors" 300000 "$BATS_TEST_TMPDIR/calib" "$D/calib.json" \
		sf-pack --model "$m" --codes "$D/codes.sfq" --calib "$BATS_TEST_TMPDIR/calib" \
		-o "$BATS_TEST_TMPDIR/o/x.sfimg"
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ "${stderr_lines[0]}" = "$(bus_line sf-pack "$m/model.safetensors")" ]
	[ -z "$output" ]
	empty_dir "$BATS_TEST_TMPDIR/o"
}

@test "sf-run with its image rewritten in place while running: one line, exit 1, no text" {
	local img=$BATS_TEST_TMPDIR/live.sfimg
	cp "$D/plain.sfimg" "$img"
	while_prompting zeros_at_1m "$img" 4096 sf-run -n 8 --temp 0 "$img"
	[ "$status" -eq 1 ]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ "${stderr_lines[0]}" = "sf-run: $img: modified since it was opened: the file changed while open (rewritten in place?)" ]
	[ -z "$output" ]
}
