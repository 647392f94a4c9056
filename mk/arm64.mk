# make ARCH=arm64: cross-build every command, fixture and unit test for
# aarch64 with Debian's gcc-aarch64-linux-gnu and the arm64 libraries of
# dpkg multiarch (libjansson-dev:arm64 and the rest, .ci/run installs
# them), into build/arm64 (or O=) beside the native build. make check ARCH=arm64
# runs the tests under qemu-user: the unit tests as `qemu-aarch64 TEST`,
# the commands and fixtures through wrapper scripts in build/arm64/qemu
# that the bats tests find as SF_BIN and SF_FIXTURES. QEMU_CPU picks the
# emulated CPU (default max: NEON, dot product, i8mm; cortex-a53 has
# NEON without dot product). The libraries' loader is libc6:arm64's own
# /lib/ld-linux-aarch64.so.1, so qemu needs no -L.

RUN_BINDIR   = $(BINDIR)
RUN_FIXTURES = $(BUILD)/fixtures
CLI_TESTS    = tests/cli

ifeq ($(ARCH),arm64)
ifneq ($(SANITIZE)$(COVERAGE),)
$(error ARCH=arm64 builds without SANITIZE and COVERAGE: their runtimes are not run under qemu-user)
endif
CC       = aarch64-linux-gnu-gcc
AR       = aarch64-linux-gnu-ar
ifeq ($(O),)
BUILD    = build/arm64
BINDIR   = build/arm64/bin
endif
QEMU    ?= qemu-aarch64
QEMU_CPU ?= max
export QEMU_CPU
TEST_EXEC    = $(QEMU)
# Under qemu the tests run about 14 times slower, so that CI stays within
# its time: without ../shared (the shared models' tests are the native
# run's; SHARED=DIR brings them back); every unit test but the four
# longest (16 of the 41 minutes the units took on a loaded 2-core
# machine; UNIT_SKIP= brings them back): three whose code has no
# architecture of its own (the batched forward pass, image packing,
# speculative decoding) and test_trellis, whose NEON search it compares
# with the plain C one, slow under qemu (8 minutes there: run it alone,
# under each QEMU_CPU, when trellis.c changes); and of the command tests those
# of sf-run, the embedded model's reference text among them
# (CLI_TESTS=tests/cli runs them all).
SHARED       = $(abspath $(BUILD))/no-shared
UNIT_SKIP    = test_batch test_image test_speculative test_trellis
CLI_TESTS    = tests/cli/sf-run.bats
RUN_BINDIR   = $(BUILD)/qemu/bin
RUN_FIXTURES = $(BUILD)/qemu/fixtures
RUN_WRAPPERS = $(BINS:$(BINDIR)/%=$(RUN_BINDIR)/%) $(FIXTURES:$(BUILD)/fixtures/%=$(RUN_FIXTURES)/%)

define qemu_wrapper
	@mkdir -p $(@D)
	@printf '#!/bin/sh\nexec %s %s "$$@"\n' '$(QEMU)' '$(abspath $<)' > $@
	@chmod +x $@
endef
$(RUN_BINDIR)/%: $(BINDIR)/%
	$(qemu_wrapper)
$(RUN_FIXTURES)/%: $(BUILD)/fixtures/%
	$(qemu_wrapper)
else ifneq ($(ARCH),)
$(error ARCH=$(ARCH): only ARCH=arm64 is known (leave ARCH unset for this machine))
endif
