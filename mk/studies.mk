# The studies of docs/RESULTS.md (tests/bench/study-*.sh): each writes CSV
# or JSON, a PNG plot and a table into $(STUDIES_OUT)/NAME. QUICK=1 runs the
# fast mix4-1m variants that make check runs through tests/cli/bench.bats.
#   make studies [STUDY="quality cache"] [QUICK=1] [STUDIES_OUT=dir]

.PHONY: studies
STUDIES     = quality placement cache e2e flash7b tasks scale
STUDY      ?= $(STUDIES)
STUDIES_OUT ?= $(abspath $(BUILD)/studies)

studies: all $(BENCHES)
	@for s in $(STUDY); do echo "== study $$s"; \
		SF_BIN=$(abspath $(BINDIR)) SF_BENCH=$(abspath $(BUILD)/bench) \
		SF_FIXTURES=$(abspath $(BUILD)/fixtures) SF_SHARED=$(SHARED) SF_ROOT=$(CURDIR) \
		STUDY_OUT=$(STUDIES_OUT)/$$s QUICK=$(QUICK) tests/bench/study-$$s.sh || exit 1; done
