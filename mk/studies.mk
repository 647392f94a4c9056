# The studies of docs/RESULTS.md (tests/bench/study-*.sh): each writes CSV
# or JSON, a PNG plot and a table into $(STUDIES_OUT)/NAME. QUICK=1 runs the
# fast mix4-1m variants that make check runs through tests/cli/bench.bats.
#   make studies [STUDY="quality cache"] [QUICK=1] [STUDIES_OUT=dir]
# make plots redraws the PNGs from the data a study left there, without
# running it, and copies them to IMG (docs/img; IMG= to leave them there).
#   make plots [STUDY=...] [STUDIES_OUT=dir] [IMG=dir]

.PHONY: studies plots
STUDIES     = quality placement cache e2e flash7b tasks scale speculative
STUDY      ?= $(STUDIES)
STUDIES_OUT ?= $(abspath $(BUILD)/studies)

studies: all $(BENCHES)
	@for s in $(STUDY); do echo "== study $$s"; \
		SF_BIN=$(abspath $(BINDIR)) SF_BENCH=$(abspath $(BUILD)/bench) \
		SF_FIXTURES=$(abspath $(BUILD)/fixtures) SF_SHARED=$(SHARED) SF_ROOT=$(CURDIR) \
		STUDY_OUT=$(STUDIES_OUT)/$$s QUICK=$(QUICK) tests/bench/study-$$s.sh || exit 1; done

PLOTS = $(basename $(notdir $(wildcard tests/bench/plot/*.gp)))
IMG  ?= docs/img
plots:
	@set -e; for s in $(filter $(PLOTS),$(STUDY)); do d=$(STUDIES_OUT)/$$s; \
		if [ -d "$$d" ]; then tests/bench/plot/plot.sh $$s "$$d"; \
			if [ -n "$(IMG)" ]; then cp "$$d/$$s.png" $(IMG)/; echo "$$d/$$s.png -> $(IMG)/$$s.png"; \
			else echo "$$d/$$s.png"; fi; \
		else echo "make plots: $$d absent: $$s not drawn (make studies STUDY=$$s)" >&2; fi; done
