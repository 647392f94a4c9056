#!/usr/bin/env bats
# make artifacts SCHED=slurm (mk/artifacts.mk, sparseflash(7) ARTIFACTS) on
# a real one-node Slurm cluster this file starts on localhost
# (tests/fixtures/slurm-cluster: munged, slurmctld and slurmd, 4 CPU slots
# on however many cores, stopped and removed in teardown_file): the
# artifacts of mix4-1m built by make -j2 here and through Slurm are the
# same bytes, and every recipe ran as a Slurm job (the cluster's job
# completion log). Skips, saying why, without Debian's slurmctld, slurmd,
# slurm-client and munge, or without root.

load ../cli/helpers

CLUSTER=$SF_ROOT/tests/fixtures/slurm-cluster
SLOTS=4

setup_file() {
	local base=${SF_TMP:-$BATS_FILE_TMPDIR}
	mkdir -p "$base"
	export D SLURM_SKIP=
	D=$(mktemp -d "$base/slurm.XXXXXX")
	[ -d "$SF_SHARED/data/mix4" ] || { SLURM_SKIP="../shared absent ($SF_SHARED): no corpus"; return 0; }
	SLURM_SKIP=$("$CLUSTER" check 2>&1) && SLURM_SKIP= || return 0
	if ! "$CLUSTER" start "$D/cluster" "$SLOTS" >/dev/null; then
		tail -n 5 "$D"/cluster/*.log >&2 || true
		"$CLUSTER" stop "$D/cluster"
		return 1
	fi
	export SLURM_CONF=$D/cluster/slurm.conf
}

teardown_file() {
	"$CLUSTER" stop "$D/cluster"
	rm -rf "$D"
}

need_cluster() {
	[ -z "$SLURM_SKIP" ] || skip "$SLURM_SKIP"
}

# the artifacts into $D/art: both methods, so codes split per layer and method
art() {
	local c=() k=() g
	for g in fortunes gcide kjv man; do
		c+=("$SF_SHARED/data/mix4/$g.profile.txt")
		k+=("$SF_SHARED/data/mix4/$g.calib.txt")
	done
	make -C "$SF_ROOT" artifacts SF_BIN="$SF_BIN" MODEL="$MODEL" OUT="$D/art" CORPUS="${c[*]}" \
		CALIB_CORPUS="${k[*]}" PROFILE_TOKENS=200 CALIB_TOKENS=8 CALIB_WINDOW=8 BUDGETS=0.3,0.6 \
		METHODS="scalar trellis" "$@"
}

# the jobs of the cluster's completion log named sf-*, one line each
sf_jobs() {
	grep -s ' Name=sf-' "$D/cluster/jobcomp.log" || true
}

@test "make artifacts SCHED=slurm without srun on PATH: one line, exit 2" {
	mkdir -p "$D/nobin"
	ln -sf "$(command -v make)" "$D/nobin/make"
	run env PATH="$D/nobin" make -s -C "$SF_ROOT" artifacts SF_BIN="$SF_BIN" MODEL="$MODEL" \
		CORPUS="$SF_ROOT/README.md" SCHED=slurm
	[ "$status" -eq 2 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"*** artifacts: SCHED=slurm: srun not found on PATH (Debian: apt-get install slurm-client; or SRUN=path).  Stop." ]]
}

@test "make artifacts SCHED=sge: one line naming the schedulers, exit 2" {
	run make -s -C "$SF_ROOT" artifacts SF_BIN="$SF_BIN" MODEL="$MODEL" CORPUS="$SF_ROOT/README.md" SCHED=sge
	[ "$status" -eq 2 ]
	[ "${#lines[@]}" -eq 1 ]
	[[ "$output" == *"*** artifacts: SCHED=sge: local or slurm.  Stop." ]]
}

@test "the cluster runs $SLOTS jobs at once on its one node" {
	need_cluster
	[ "$(scontrol show node sfnode | sed -n 's/.*CPUTot=\([0-9]*\).*/\1/p')" -eq "$SLOTS" ]
	local i n=0
	for i in $(seq "$SLOTS"); do srun -Q -n1 -c1 -J probe sleep 3 3>&- & done
	for i in $(seq 100); do
		n=$(squeue -h -t R -n probe | wc -l)
		[ "$n" -lt "$SLOTS" ] || break
		sleep 0.1
	done
	wait
	[ "$n" -eq "$SLOTS" ]
}

@test "make artifacts SCHED=slurm: the same bytes as make -j2, every recipe a Slurm job" {
	need_cluster
	need_shared
	local t0 t1 t2 t3 recipes jobs f
	t0=$EPOCHREALTIME
	run --separate-stderr art -j2
	[ "$status" -eq 0 ]
	t1=$EPOCHREALTIME
	# the recipes make ran: each command line starts with a tool's path
	recipes=$(grep -c "^$SF_BIN/sf-" <<<"$output")
	# the artifacts record the paths they were made from: the same OUT both ways
	mv "$D/art" "$D/local"
	t2=$EPOCHREALTIME
	run --separate-stderr art SCHED=slurm -j"$SLOTS"
	[ "$status" -eq 0 ]
	t3=$EPOCHREALTIME
	[ "$(grep -c '^srun .* --job-name=sf-' <<<"$output")" -eq "$recipes" ]
	diff <(cd "$D/local" && find . -type f | sort) <(cd "$D/art" && find . -type f | sort)
	for f in $(cd "$D/local" && find . -type f); do
		cmp "$D/local/$f" "$D/art/$f"
	done
	# every recipe completed as a job on the node
	jobs=$(sf_jobs | grep -c 'JobState=COMPLETED .* NodeList=sfnode ')
	[ "$jobs" -eq "$recipes" ]
	[ "$(sf_jobs | wc -l)" -eq "$recipes" ]
	# (the merge of coact.sfc and scores.json is named after either)
	for f in sf-kjv.profile.sft sf-L3.sfc 'sf-(coact.sfc|scores.json)' sf-place-coact.json \
		sf-scalar-L0.sfq sf-trellis-L3.sfq sf-codes-trellis.sfq sf-trellis-L2.json \
		sf-calib-scalar.json sf-coact-trellis.sfimg; do
		sf_jobs | grep -qE " Name=$f " || { echo "no job $f"; false; }
	done
	printf '# %d recipes: make -j2 here %.1f s, through Slurm -j%d on %d slots %.1f s\n' \
		"$recipes" "$(awk "BEGIN { print $t1 - $t0 }")" "$SLOTS" "$SLOTS" "$(awk "BEGIN { print $t3 - $t2 }")" >&3
	# a second run submits nothing
	run art SCHED=slurm -j"$SLOTS"
	[ "$status" -eq 0 ]
	[[ "$output" == *"Nothing to be done for 'artifacts'."* ]]
	[ "$(sf_jobs | wc -l)" -eq "$recipes" ]
}

@test "make artifacts SCHED=slurm: a job Slurm refuses stops the build with srun's error" {
	need_cluster
	need_shared
	run --separate-stderr art -s SCHED=slurm SRUN_OPTS=--partition=nosuch OUT="$D/refused"
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"srun: error: "*"nosuch"* ]]
	[ ! -e "$D/refused/trace/kjv.profile.sft" ]
}
