# Shared part of the benchmarks that run sf-run from an image on the
# device (tests/bench/flash-pipeline.sh, prefill-image.sh, study-7b.sh):
# medians, a run capped the way a small device would be, prompts of a
# given token count, fio's figures. Sourced, not run; the caller sets
# img (the image) and THREADS.

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# A child of our own memory cgroup (v1), when the controller is writable:
# flash_cgroup NAME sets cg to it (removed at exit), or leaves cg empty.
cg=
flash_cgroup() {
	local self base
	self=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup 2>/dev/null || true)
	base=/sys/fs/cgroup/memory${self%/}
	if [ -n "$self" ] && [ -w "$base" ] && mkdir "$base/$1-$$" 2>/dev/null; then
		cg=$base/$1-$$
		echo "runs capped by the memory cgroup $cg" >&2
	else
		echo "no writable cgroup v1 memory controller: runs capped by --ram only" >&2
	fi
}

capped() {	# RAM CMD...: CMD in the cgroup limited to RAM (page cache charged)
	local ram=$1
	shift
	if [ -n "$cg" ]; then
		echo "$ram" > "$cg/memory.limit_in_bytes"
		bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$cg" "$@"
	else
		"$@"
	fi
}

drop() { dd if="$img" iflag=nocache count=0 status=none; }

# The path of a prompt of about n tokens (at most n) in dir: words of the
# man pages, their count shrunk in proportion to the tokenizer's count
# (a context of one position refuses it with the count).
prompt_of() {	# N DIR
	local n=$1 f=$2/prompt.$1 w got
	if ! [ -f "$f" ]; then
		grep -hv "^[.']" "$root"/man/*.[1-9] | tr -s ' \n\t' '   ' | tr ' ' '\n' |
			grep . | head -n $((n * 2)) > "$f.words"
		w=$(wc -l < "$f.words")
		while :; do
			head -n "$w" "$f.words" | tr '\n' ' ' > "$f"
			# the count from the refusal of a context of one position:
			# no pass runs
			got=$(sf-run "$img" -p "$(cat "$f")" -n 0 -c 1 -t "$THREADS" 2>&1 |
			      sed -n 's/.*prompt: \([0-9]*\) tokens do not fit.*/\1/p')
			[ -n "$got" ] && [ "$got" -gt "$n" ] || break
			w=$((w * n / got))
		done
		rm -f "$f.words"
	fi
	echo "$f"
}

device_gbs() {	# RW BS DEPTH: fio O_DIRECT reads of the image for 5 s, GB/s
	fio --name=dev --filename="$img" --readonly --rw="$1" --bs="$2" --iodepth="$3" --direct=1 \
	    --ioengine=io_uring --runtime=5 --time_based --output-format=json 2>/dev/null |
		jq '.jobs[0].read.bw_bytes / 1e9'
}
