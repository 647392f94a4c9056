# sparseflash: `make` builds every command into bin/, `make check` runs
# every test, `make check SANITIZE=1` the same under ASan and UBSan,
# `make coverage` the same with gcov and prints line coverage per folder.
# ARCH=arm64 cross-builds into build/arm64 with Debian's aarch64 toolchain
# and runs make check's tests under qemu-user (mk/arm64.mk).

CC      ?= cc
PREFIX  ?= /usr/local
SHARED  ?= $(abspath ../shared)

CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -Wall -Wextra -g -Ilib/common -Icmd
LDLIBS  = -ljansson -lcsv -luring -lpcre2-8 -lutf8proc -lpthread -lm
# a command's own libraries beyond LDLIBS
LDLIBS_sf-serve = -lmicrohttpd

ifeq ($(SANITIZE),1)
BUILD   = build/san
BINDIR  = build/san/bin
CFLAGS_OPT = -O1 -fno-omit-frame-pointer -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow
LDFLAGS_MODE = -fsanitize=address,undefined,float-cast-overflow
else ifeq ($(COVERAGE),1)
BUILD   = build/cov
BINDIR  = build/cov/bin
CFLAGS_OPT = -O1 --coverage
LDFLAGS_MODE = --coverage
else
BUILD   = build/opt
BINDIR  = bin
CFLAGS_OPT = -O2
endif

# O=DIR puts every build product under DIR (parallel work trees).
ifneq ($(O),)
BUILD   = $(O)
BINDIR  = $(O)/bin
endif

include mk/arm64.mk

ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS_OPT) $(CFLAGS)
ALL_LDFLAGS = $(LDFLAGS_MODE) $(LDFLAGS)

LIB_SRC  = $(wildcard lib/common/*/*.c)
LIB_HDR  = $(wildcard lib/common/*/*.h)
CLI_SRC  = $(wildcard cmd/common/*.c)
CLI_HDR  = $(wildcard cmd/common/*.h)
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB      = $(BUILD)/libsparseflash.a
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/%.o)
CLI_LIB  = $(BUILD)/libsfcli.a
CMDS     = $(notdir $(wildcard cmd/sf-*))
BINS     = $(CMDS:%=$(BINDIR)/%)
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNITS    = $(filter-out $(UNIT_SKIP:%=$(BUILD)/tests/%),$(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%))
FIXTURE_SRC = $(wildcard tests/fixtures/*.c)
FIXTURES = $(FIXTURE_SRC:tests/fixtures/%.c=$(BUILD)/fixtures/%)
BENCH_SRC = $(wildcard tests/bench/*.c)
BENCHES  = $(BENCH_SRC:tests/bench/%.c=$(BUILD)/bench/%)
MAN      = $(wildcard man/*.[1-9])

.PHONY: all check check-kernels check-full coverage lint unit cli install uninstall help demo serve bench clean
all: $(BINS) $(FIXTURES)

$(BUILD)/%.o: %.c $(LIB_HDR) $(CLI_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# cmd/common: the command-line support every command links
$(CLI_LIB): $(CLI_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# A command is every .c file of its cmd/ directory.
.SECONDEXPANSION:
$(BINDIR)/%: $(LIB) $(CLI_LIB) $$(wildcard cmd/$$*/*.c) $(LIB_HDR) $(CLI_HDR)
	@mkdir -p $(BINDIR)
	$(CC) $(ALL_CFLAGS) -o $@ $(wildcard cmd/$*/*.c) $(CLI_LIB) $(LIB) $(ALL_LDFLAGS) \
		$(LDLIBS_$*) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(wildcard tests/unit/*.h) $(LIB) $(CLI_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(CLI_LIB) $(LIB) $(ALL_LDFLAGS) $(LDLIBS)

$(BUILD)/bench/%: tests/bench/%.c $(LIB) $(CLI_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(CLI_LIB) $(LIB) $(ALL_LDFLAGS) $(LDLIBS)

$(BUILD)/fixtures/%: tests/fixtures/%.c $(LIB) $(CLI_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(CLI_LIB) $(LIB) $(ALL_LDFLAGS) $(LDLIBS)

# Environment every test reads: where the binaries, fixtures, embedded
# model and ../shared are.
TEST_ENV = SF_BIN=$(abspath $(RUN_BINDIR)) SF_FIXTURES=$(abspath $(RUN_FIXTURES)) \
	SF_EXEC="$(TEST_EXEC)" SF_ROOT=$(CURDIR) SF_SHARED=$(SHARED) SF_TMP=$(abspath $(BUILD)/tmp) \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1

# The architecture's include and no-print rules (tests/lint/layers.sh)
lint:
	@tests/lint/layers.sh

check: all $(UNITS) $(RUN_WRAPPERS)
	@mkdir -p $(BUILD)/tmp
	@$(TEST_ENV) tests/run-unit $(UNITS)
	@$(TEST_ENV) tests/run-cli $(CLI_TESTS)
	@tests/lint/layers.sh

# The unit tests of the dense and quantized kernels against their _ref
# alone: on arm64 the families with a dot-product level, run again under
# a QEMU_CPU without it (.ci/run: cortex-a53)
KERNEL_UNITS = $(addprefix $(BUILD)/tests/,test_kernels test_matmul test_quant)
check-kernels: $(KERNEL_UNITS)
	@mkdir -p $(BUILD)/tmp
	@$(TEST_ENV) tests/run-unit $(KERNEL_UNITS)

# check, then the long runs: every reference perplexity, mix4-46m's whole
# reference.json (test_forward's logits, sf-run's ids and text), the man pages'
# examples, the artifacts rules and study scripts, the artifacts through a
# one-node Slurm cluster on localhost, longer pool races
check-full: check $(BENCHES)
	@$(TEST_ENV) SF_FULL=1 tests/run-unit $(filter %/test_pool %/test_forward,$(UNITS))
	@$(TEST_ENV) SF_FULL=1 tests/run-cli tests/cli-full

# make install [PREFIX=/usr/local] [DESTDIR=]: the commands, man pages,
# the static library with its headers and pkg-config file, bash completion
VERSION    = $(shell sed -n 's/^\#define SF_VERSION "\(.*\)"/\1/p' cmd/common/cli.h)
COMPLETIONS = $(DESTDIR)$(PREFIX)/share/bash-completion/completions
PARTS      = base formats engine offline online
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man7 \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig $(COMPLETIONS)
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin
	for m in $(MAN); do install -m 644 $$m $(DESTDIR)$(PREFIX)/share/man/man$${m##*.}; done
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libsparseflash.a
	for p in $(PARTS); do install -d $(DESTDIR)$(PREFIX)/include/sparseflash/$$p && \
		install -m 644 lib/common/$$p/*.h $(DESTDIR)$(PREFIX)/include/sparseflash/$$p; done
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' mk/sparseflash.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/sparseflash.pc
	for c in $(CMDS); do install -m 644 mk/sparseflash.bash $(COMPLETIONS)/$$c; done

uninstall:
	rm -f $(CMDS:%=$(DESTDIR)$(PREFIX)/bin/%) $(CMDS:%=$(COMPLETIONS)/%) \
		$(foreach m,$(MAN),$(DESTDIR)$(PREFIX)/share/man/man$(subst .,,$(suffix $(m)))/$(notdir $(m))) \
		$(DESTDIR)$(PREFIX)/lib/libsparseflash.a $(DESTDIR)$(PREFIX)/lib/pkgconfig/sparseflash.pc
	rm -rf $(DESTDIR)$(PREFIX)/include/sparseflash

help:
	@echo 'Targets:'
	@echo '  all (default)   build the commands into bin/ and the test fixtures'
	@echo '  check           unit, command and layout tests: about 1.5 min'
	@echo '  check-kernels   the dense and quantized kernels'"'"' unit tests alone (each level against _ref)'
	@echo '  check-full      check, then the long runs CI also does: about 2 min'
	@echo '  coverage        check built with --coverage, then line coverage per folder (lcov)'
	@echo '  lint            the layout rules of lib/ (tests/lint/layers.sh)'
	@echo '  demo            generate text with the embedded model: about 25 s with the build'
	@echo '  serve           sf-serve on the embedded model at 127.0.0.1:8080 (PORT=)'
	@echo '  bench           every tests/bench/*.sh, or BENCH=script'
	@echo '  studies         the paper reproductions of docs/RESULTS.md (STUDY=, QUICK=1)'
	@echo '  plots           redraw the studies'"'"' PNGs from their data into docs/img (STUDY=, IMG=)'
	@echo '  artifacts       every offline artifact of MODEL= from CORPUS= (OUT=, -j, SCHED=slurm)'
	@echo '  fuzz            libFuzzer harnesses of every parser (FUZZ_SECONDS=)'
	@echo '  install         commands, man pages, library, headers, pkg-config, completion'
	@echo '  uninstall       remove what install put there'
	@echo '  clean           remove build/ and bin/'
	@echo '  (times on an idle 2-core x86-64 machine, as in README.md)'
	@echo 'Variables:'
	@echo '  SANITIZE=1      build and test under AddressSanitizer and UBSan'
	@echo '  COVERAGE=1      build with --coverage into build/cov (what make coverage uses)'
	@echo '  ARCH=arm64      cross-build into build/arm64; check runs the tests under qemu-aarch64'
	@echo '  O=DIR           put every build product under DIR'
	@echo '  SHARED=DIR      the shared models and data (default ../shared)'
	@echo '  PREFIX=DIR      install prefix (default /usr/local); DESTDIR= staging root'
	@echo '  CC, CFLAGS      compiler and extra flags'

# make coverage: make check built with gcov instrumentation into
# build/cov (counters zeroed first), then lcov's line coverage of lib/ and
# cmd/ summed per folder (tests/coverage.sh) and an HTML report in
# build/cov/html. Needs lcov (Debian: apt-get install lcov).
coverage:
	@command -v lcov >/dev/null || { echo 'make coverage: lcov is not installed (apt-get install lcov)' >&2; exit 1; }
	@mkdir -p build/cov
	@find build/cov -name '*.gcda' -delete
	$(MAKE) check COVERAGE=1
	@tests/coverage.sh build/cov

demo: all
	$(BINDIR)/sf-run --model models/mix4-1m -p "In the beginning God created" -n 48 --seed 1

# The OpenAI-compatible server on the embedded model (man/sf-serve.1)
PORT ?= 8080
serve: all
	$(BINDIR)/sf-serve --model models/mix4-1m --port $(PORT)

# Every benchmark script, or one: make bench BENCH=tests/bench/dense.sh
BENCH ?= $(wildcard tests/bench/*.sh)
bench: all $(BENCHES)
	@for b in $(BENCH); do echo "== $$b"; \
		SF_BIN=$(abspath $(BINDIR)) SF_BENCH=$(abspath $(BUILD)/bench) \
		SF_FIXTURES=$(abspath $(BUILD)/fixtures) SF_SHARED=$(SHARED) $$b || exit 1; done

clean:
	rm -rf build bin

# make fuzz FUZZ_SECONDS=N: libFuzzer harnesses of every parser (needs clang)
include tests/fuzz/fuzz.mk

# make artifacts MODEL=dir CORPUS="files" [OUT=dir] [SCHED=slurm]: every offline artifact
# of a model (trace, co-activation, placements, codes, calibration, images)
include mk/artifacts.mk

# make studies [STUDY=quality] [QUICK=1]: the paper reproductions of
# docs/RESULTS.md, results and plots under $(BUILD)/studies
include mk/studies.mk
