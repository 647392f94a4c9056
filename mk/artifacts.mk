# Every offline artifact of one model as make rules (sparseflash(7),
# ARTIFACTS): per corpus file a trace, per layer its co-activation shard
# from all traces, merged; one placement per method; per layer the codes of
# each method, merged, then calibrated per layer, merged; one image per
# placement and method.
#
#   make artifacts MODEL=../shared/models/mix4-5m CORPUS="../shared/data/mix4/*.profile.txt" \
#       [OUT=dir] [CALIB_CORPUS=files] [BUDGETS=0.1,0.2] [METHODS="trellis scalar"] -j2
#
# Only what changed rebuilds: each stage depends on its inputs' files and on
# a stamp holding its options, rewritten only when they change, so a new
# BUDGETS recalibrates and repacks but keeps the traces and codes. The tools
# are order-only prerequisites: a rebuilt binary does not redo the
# artifacts (make artifacts-clean OUT=dir for that). Independent traces,
# layer shards, per-layer encodes and calibrations and placements run in
# parallel under -j.
# Included from the Makefile; usable alone with make -f mk/artifacts.mk
# SF_BIN=dir.
#
# SCHED=slurm runs every recipe, merges included, as one Slurm job through
# srun (SRUN, default srun; SRUN_OPTS, such as --partition=P --mem=4G), so
# make -jN keeps N jobs in flight on a cluster; MODEL, CORPUS, OUT and
# SF_BIN must be on a filesystem every node sees at the same path.

.PHONY: artifacts artifacts-clean
.SECONDEXPANSION:

ifeq ($(origin SF_BIN),undefined)
SF_BIN := $(abspath $(BINDIR))
ART_TOOLS = $(BINS)
endif

ART_PROFILE_TOKENS ?= $(or $(PROFILE_TOKENS),4000)
ART_DENSITY   ?= $(or $(DENSITY),0.3)
ART_BUDGETS_DEFAULT := 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9
ART_BUDGETS   ?= $(or $(BUDGETS),$(ART_BUDGETS_DEFAULT))
ART_METHODS   ?= $(or $(METHODS),trellis)
ART_PLACEMENTS ?= $(or $(PLACEMENTS),identity frequency coact)
ART_CALIB_TOKENS ?= $(or $(CALIB_TOKENS),256)
ART_CALIB_WINDOW ?= $(or $(CALIB_WINDOW),128)
ART_THREADS   ?= $(or $(THREADS),1)
SCHED ?= local
SRUN  ?= srun

ifneq ($(MODEL),)
# how a recipe's command runs: here, or as a Slurm job named after its target
ifeq ($(SCHED),slurm)
ifeq ($(shell command -v $(firstword $(SRUN))),)
$(error artifacts: SCHED=slurm: $(firstword $(SRUN)) not found on PATH (Debian: apt-get install slurm-client; or SRUN=path))
endif
# one task of THREADS CPUs; no job reads make's terminal; one Ctrl-C
# cancels the jobs (their outputs are renamed only when complete)
ART_RUN = $(SRUN) --quiet --quit-on-interrupt --input=none --ntasks=1 --cpus-per-task=$(ART_THREADS) \
	--job-name=sf-$(@F) $(SRUN_OPTS)
else ifeq ($(SCHED),local)
ART_RUN =
else
$(error artifacts: SCHED=$(SCHED): local or slurm)
endif
OUT ?= build/artifacts/$(notdir $(abspath $(MODEL)))
ART_MODEL_FILES := $(MODEL)/config.json $(wildcard $(MODEL)/*.safetensors) $(MODEL)/tokenizer.json
ART_CORPUS := $(wildcard $(CORPUS))
ART_CALIB_CORPUS := $(or $(wildcard $(CALIB_CORPUS)),$(ART_CORPUS))
ART_LAYERS := $(shell jq -e .num_hidden_layers $(MODEL)/config.json)
ifeq ($(ART_LAYERS),)
$(error artifacts: $(MODEL)/config.json: no num_hidden_layers)
endif
ifeq ($(ART_CORPUS),)
$(error artifacts: CORPUS="$(CORPUS)": no such file)
endif
ART_L := $(shell seq 0 $$(($(ART_LAYERS) - 1)))
# one shard per corpus file, named by the file (kjv.profile.txt -> kjv.profile)
ART_SHARD = $(basename $(notdir $(1)))
ART_TRACES := $(foreach f,$(ART_CORPUS),$(OUT)/trace/$(call ART_SHARD,$(f)).sft)
ART_IMAGES := $(foreach p,$(ART_PLACEMENTS),$(foreach m,$(ART_METHODS),$(OUT)/$(p)-$(m).sfimg))

# $(call art_stamp,NAME,TEXT): $(OUT)/opts/NAME holds TEXT, touched only on change
art_stamp = $(shell mkdir -p $(OUT)/opts; f=$(OUT)/opts/$(1); \
	[ "$$(cat $$f 2>/dev/null)" = '$(2)' ] || printf '%s\n' '$(2)' > $$f)
$(call art_stamp,profile,$(ART_DENSITY) $(ART_PROFILE_TOKENS))
$(call art_stamp,calib,$(ART_BUDGETS) $(ART_CALIB_TOKENS) $(ART_CALIB_WINDOW) $(ART_CALIB_CORPUS))

artifacts: $(ART_IMAGES) $(OUT)/scores.json $(ART_PLACEMENTS:%=$(OUT)/place-%.json)
.PRECIOUS: $(OUT)/place-%.json $(OUT)/codes/%.sfq $(OUT)/coact/L%.sfc $(OUT)/calib/%.json

# trace of one corpus file, tagged with its genre as the task
define art_trace
$(OUT)/trace/$(call ART_SHARD,$(1)).sft: $(1) $(ART_MODEL_FILES) $(OUT)/opts/profile | $(ART_TOOLS)
	@mkdir -p $$(@D)
	$$(ART_RUN) $(SF_BIN)/sf-profile -q --model $(MODEL) --density $(ART_DENSITY) -t $(ART_THREADS) \
		--max-tokens $(ART_PROFILE_TOKENS) --task $(firstword $(subst ., ,$(notdir $(1)))) $(1) -o $$@
endef
$(foreach f,$(ART_CORPUS),$(eval $(call art_trace,$(f))))

# co-activation statistics: one job per layer over every trace, merged
$(OUT)/coact/L%.sfc: $(ART_TRACES) | $(ART_TOOLS)
	@mkdir -p $(@D)
	$(ART_RUN) $(SF_BIN)/sf-coact -q -t $(ART_THREADS) --layers $* $(ART_TRACES) -o $@
$(OUT)/coact.sfc $(OUT)/scores.json &: $(ART_L:%=$(OUT)/coact/L%.sfc) | $(ART_TOOLS)
	$(ART_RUN) $(SF_BIN)/sf-coact -q --merge --scores $(OUT)/scores.json $^ -o $(OUT)/coact.sfc

$(OUT)/place-%.json: $(OUT)/coact.sfc | $(ART_TOOLS)
	$(ART_RUN) $(SF_BIN)/sf-place -q -t $(ART_THREADS) --method $* $< -o $@

# codes: one job per layer and method, merged; calibration the same
define art_codes
$(OUT)/codes/$(1)-L%.sfq: $(ART_MODEL_FILES) | $(ART_TOOLS)
	@mkdir -p $$(@D)
	$$(ART_RUN) $(SF_BIN)/sf-encode --model $(MODEL) --method $(1) --layers $$* -t $(ART_THREADS) -o $$@
$(OUT)/codes-$(1).sfq: $(ART_L:%=$(OUT)/codes/$(1)-L%.sfq) | $(ART_TOOLS)
	$$(ART_RUN) $(SF_BIN)/sf-encode --merge $$^ -o $$@
$(OUT)/calib/$(1)-L%.json: $(OUT)/codes-$(1).sfq $(ART_CALIB_CORPUS) $(OUT)/opts/calib | $(ART_TOOLS)
	@mkdir -p $$(@D)
	$$(ART_RUN) $(SF_BIN)/sf-encode --model $(MODEL) --calibrate --codes $$< --layers $$* \
		-t $(ART_THREADS) $(foreach f,$(ART_CALIB_CORPUS),--corpus $(f)) --budgets $(ART_BUDGETS) \
		--calib-tokens $(ART_CALIB_TOKENS) --window $(ART_CALIB_WINDOW) -o $$@
$(OUT)/calib-$(1).json: $(ART_L:%=$(OUT)/calib/$(1)-L%.json) | $(ART_TOOLS)
	$$(ART_RUN) $(SF_BIN)/sf-encode --merge $$^ -o $$@
endef
$(foreach m,$(ART_METHODS),$(eval $(call art_codes,$(m))))

$(OUT)/%.sfimg: $$(OUT)/place-$$(word 1,$$(subst -, ,$$*)).json \
		$$(OUT)/codes-$$(word 2,$$(subst -, ,$$*)).sfq $$(OUT)/calib-$$(word 2,$$(subst -, ,$$*)).json \
		$(ART_MODEL_FILES) | $(ART_TOOLS)
	$(ART_RUN) $(SF_BIN)/sf-pack --model $(MODEL) --placement $(word 1,$^) --codes $(word 2,$^) \
		--calib $(word 3,$^) -o $@

artifacts-clean:
	rm -rf $(OUT)
else
artifacts artifacts-clean:
	@echo 'usage: make artifacts MODEL=dir CORPUS="files" [OUT=dir] (see mk/artifacts.mk)' >&2; exit 2
endif
