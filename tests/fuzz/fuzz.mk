# Fuzzing (tests/fuzz/README): `make fuzz FUZZ_SECONDS=N` builds one
# libFuzzer harness per parser with clang, the library compiled with
# -fsanitize=fuzzer-no-link,address,undefined into its own directory,
# makes the seed corpora from the built tools (tests/fuzz/seeds.sh), and
# runs each harness for N seconds; any crash, sanitizer report, leak or
# hang fails. Included from the Makefile; also usable as
# `make -f Makefile -f tests/fuzz/fuzz.mk fuzz`.
ifndef SF_FUZZ_MK
SF_FUZZ_MK := 1

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 10
FUZZ_DIR     ?= $(if $(O),$(O)/fuzz,build/fuzz)
FUZZ_SAN      = -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS   = -std=c11 -D_GNU_SOURCE -Wall -Wextra -g -O1 -fno-omit-frame-pointer \
	-Ilib/common -Icmd $(FUZZ_SAN)
FUZZ_NAMES    = $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS     = $(FUZZ_NAMES:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_LIB      = $(FUZZ_DIR)/libsparseflash.a
FUZZ_OBJ      = $(LIB_SRC:lib/common/%.c=$(FUZZ_DIR)/obj/%.o)

.PHONY: fuzz fuzz-build fuzz-seeds
fuzz: fuzz-build fuzz-seeds
	@FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_NAMES)

fuzz-build: $(FUZZ_BINS)

fuzz-seeds: $(BINS) $(FIXTURES)
	@tests/fuzz/seeds.sh $(abspath $(BINDIR)) $(abspath $(BUILD)/fixtures) $(FUZZ_DIR)/seeds

$(FUZZ_DIR)/obj/%.o: lib/common/%.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

# clang 14's __builtin_cpu_supports does not know "f16c": the CPU probe
# and the kernels, which parse nothing, are compiled by $(CC) without
# instrumentation.
$(FUZZ_DIR)/obj/engine/cpu.o $(FUZZ_DIR)/obj/engine/kernels.o: $(FUZZ_DIR)/obj/engine/%.o: \
		lib/common/engine/%.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -O2 -c -o $@ $<

$(FUZZ_LIB): $(FUZZ_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB) $(LDLIBS)

endif
