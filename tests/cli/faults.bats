#!/usr/bin/env bats
# I/O faults (issue 9): sf-pack out of space (a 1 MiB tmpfs, where the
# machine lets us mount one) or past the file size limit (RLIMIT_FSIZE with
# SIGXFSZ ignored: write fails with EFBIG, no privilege needed), and images
# truncated before sf-run or sf-pack open them. Each gives one clear line,
# exit 1, no output file and nothing presented as a result; an image
# truncated under a running sf-run (its header and resident regions were
# once mapped, and it died of SIGBUS). Injected read errors and short reads
# of sf-run's io_uring layer (SF_FAULT) are in sf-run-image.bats; the
# library side of a file truncated while open in tests/unit/test_faults.c.

load helpers

setup_file() {
	export D=$BATS_FILE_TMPDIR
	"$SF_BIN/sf-pack" --model "$MODEL" -o "$D/plain.sfimg"
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
	[[ "${stderr_lines[0]}" =~ ^sf-pack:\ $MNT/x\.sfimg\.tmp\.[A-Za-z0-9]{6}:\ write:\ No\ space\ left\ on\ device$ ]]
	[ "${#stderr_lines[@]}" -eq 1 ]
	[ -z "$output" ]
	empty_dir "$MNT"
}

@test "sf-pack past the file size limit: one line, exit 1, nothing left" {
	mkdir "$BATS_TEST_TMPDIR/out"
	run --separate-stderr bash -c 'trap "" XFSZ; ulimit -f 512; exec "$@"' _ \
		sf-pack --model "$MODEL" -o "$BATS_TEST_TMPDIR/out/x.sfimg"
	[ "$status" -eq 1 ]
	[[ "${stderr_lines[0]}" =~ ^sf-pack:\ $BATS_TEST_TMPDIR/out/x\.sfimg\.tmp\.[A-Za-z0-9]{6}:\ write:\ File\ too\ large$ ]]
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

# sf-run reads its prompt from a FIFO after opening the image: once it
# waits there (its main thread in read(2) on fd 0), the image is cut to
# size, then the prompt is sent. The flash reads find the end of the file.
truncated_under_sf_run() {
	local size=$1 img=$BATS_TEST_TMPDIR/live.sfimg fifo=$BATS_TEST_TMPDIR/prompt pid run i nr fd w
	cp "$D/plain.sfimg" "$img"
	mkfifo "$fifo"
	timeout 60 sf-run -n 8 --temp 0 "$img" <"$fifo" >"$BATS_TEST_TMPDIR/out" \
		2>"$BATS_TEST_TMPDIR/err" &
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
		skip "cannot see sf-run waiting for its prompt (/proc/PID/syscall)"
	fi
	truncate -s "$size" "$img"
	echo "In the beginning" >&"$w"
	exec {w}>&-
	status=0
	wait "$pid" || status=$?
	mapfile -t stderr_lines <"$BATS_TEST_TMPDIR/err"
	output=$(cat "$BATS_TEST_TMPDIR/out")
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
