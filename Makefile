# dtrain — one Makefile for the library, the program, the tests and the fuzz targets.
#
#   make                      build build/dtrain, build/libdtrain.a and build/libdtrain.so.0
#   make install PREFIX=/usr/local DESTDIR=   the header, both libraries, dtrain.pc and dtrain
#   make test                 build and run every test suite (the README's test command)
#   make test SANITIZE=address,undefined   the same under ASan+UBSan, in build-san/
#   make fuzz                 build the libFuzzer targets with clang and run each briefly
#   make WERROR=1             warnings are errors (CI sets this)
#
# Missing Debian packages are installed by scripts/install-deps.sh on first use.

CC      ?= cc
SANITIZE ?=
WERROR  ?=
BUILD   ?= $(if $(SANITIZE),build-san,build)

WARNINGS := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
            -Wformat=2 -Wpointer-arith -Wcast-qual -Wundef -Wwrite-strings \
            -Wold-style-definition -Wnull-dereference -Wdouble-promotion \
            -Wimplicit-fallthrough -Wno-unused-parameter
ifneq ($(WERROR),)
WARNINGS += -Werror
endif

# The sanitizer build compiles the code the plain one runs (-O2, this CPU's vector
# kernels: the AVX-512 paths of kernels_direct.c, fixed_point.c, optimizer.c) and
# checks it; at -O1 without -march=native it checked only the portable fallbacks,
# and their per-lane fmaf made the training tests 5-33x slower (docs/TESTING.md).
OPT      := -O2 -march=native -fvect-cost-model=dynamic -fno-math-errno \
            $(if $(SANITIZE),-fno-omit-frame-pointer -fsanitize=$(SANITIZE) -fno-sanitize-recover=all)
# Debian keeps HDF5's headers in a directory of its own (the serial flavour) and links the
# library as libhdf5_serial from the standard directory, so no -L (which dtrain.pc would carry).
HDF5_CFLAGS := -I/usr/include/hdf5/serial
HDF5_LIBS   := -lhdf5_serial
CPPFLAGS := -Iinclude -Isrc $(HDF5_CFLAGS) -D_GNU_SOURCE -MMD -MP
CFLAGS   := -std=c11 -g $(OPT) $(WARNINGS) -pthread
LDFLAGS  := $(if $(SANITIZE),-fsanitize=$(SANITIZE)) -pthread
LDLIBS   := -ldl -lz -larchive -ljansson -lyaml -lsodium -lcrypto -ljpeg -lpng16 -lgif $(HDF5_LIBS) -lm

LIB_SRC  := $(sort $(wildcard src/*/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
MAIN_OBJ := $(BUILD)/src/main.o
TEST_SRC := $(sort $(wildcard tests/harness/*.c tests/unit/*.c tests/cli/*.c))
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
FUZZ_SRC := $(sort $(wildcard tests/fuzz/*.c))
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)

DEPS_STAMP := build/.deps-installed

# The shared library's version comes from the header (DTRAIN_VERSION); the
# soname carries the major number only: a program linked today finds
# libdtrain.so.0 whatever 0.x is installed.
VERSION  := $(shell sed -n 's/^\#define DTRAIN_VERSION "\(.*\)"/\1/p' include/dtrain.h)
SONAME   := libdtrain.so.$(firstword $(subst ., ,$(VERSION)))
SO_REAL  := libdtrain.so.$(VERSION)

PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

.PHONY: all test check run run-local run-cluster fuzz bench clean deps install uninstall FORCE
all: $(BUILD)/dtrain $(BUILD)/libdtrain.a $(BUILD)/$(SONAME)

deps: $(DEPS_STAMP)
$(DEPS_STAMP): scripts/install-deps.sh
	@scripts/install-deps.sh
	@mkdir -p build && touch $@

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# Library objects are position-independent (one set serves both libraries)
# and hidden unless include/dtrain.h marks them DTRAIN_API: the shared
# library exports the API and nothing else, while libdtrain.a keeps every
# global symbol linkable for the program and the internal tests (hidden
# visibility only keeps a symbol out of a shared object's dynamic table).
# With hidden symbols nothing can be interposed, so -fPIC code calls and
# loads directly, as the default -fPIE does (measured: docs/BENCHMARKS.md).
LIB_CFLAGS := -fPIC -fvisibility=hidden
$(LIB_OBJ): CFLAGS += $(LIB_CFLAGS)

# Objects are rebuilt when the code generation flags change (this stamp is
# rewritten only then), so a build never mixes objects of two flag sets;
# warnings (WERROR) do not change the code and are left out.
FLAGS_STAMP := $(BUILD)/.flags
$(FLAGS_STAMP): FORCE
	@mkdir -p $(BUILD)
	@echo '$(CC) $(CPPFLAGS) $(OPT) | $(LIB_CFLAGS)' | cmp -s - $@ || echo '$(CC) $(CPPFLAGS) $(OPT) | $(LIB_CFLAGS)' > $@
$(LIB_OBJ) $(MAIN_OBJ) $(TEST_OBJ): $(FLAGS_STAMP)

# Tests see the harness header and may pass string literals as argv; the
# API tests compile outside programs with the sanitizers this build uses.
$(TEST_OBJ): CPPFLAGS += -Itests/harness
$(TEST_OBJ): CFLAGS += -Wno-write-strings
$(BUILD)/tests/cli/test_api_%.o $(BUILD)/tests/cli/api_util.o: CPPFLAGS += -DDT_TEST_SANITIZE='"$(SANITIZE)"'

$(BUILD)/libdtrain.a: $(LIB_OBJ)
	@rm -f $@
	@echo "  AR      $@"
	@ar rcs $@ $^

# The shared library: real file libdtrain.so.X.Y.Z, soname libdtrain.so.X,
# and the libdtrain.so link a build uses. Every undefined symbol must be
# resolved by the libraries named here (not under the sanitizers, whose
# runtime only the program links).
SO_LDFLAGS := -shared -Wl,-soname,$(SONAME) $(if $(SANITIZE),,-Wl,--no-undefined -Wl,-z,defs)
$(BUILD)/$(SO_REAL): $(LIB_OBJ)
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) $(SO_LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/$(SONAME): $(BUILD)/$(SO_REAL)
	@ln -sf $(SO_REAL) $@
	@ln -sf $(SONAME) $(BUILD)/libdtrain.so

# Installs what an outside program needs: `cc prog.c $(pkg-config --cflags
# --libs dtrain)`. DESTDIR stages the tree (packaging, the API tests);
# NOBUILD=1 installs what is built without checking it is up to date (the
# API tests, which must not start a build from inside the test run).
INSTALL_DEPS := $(if $(NOBUILD),,$(BUILD)/dtrain $(BUILD)/libdtrain.a $(BUILD)/$(SONAME))
install: $(INSTALL_DEPS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 755 $(BUILD)/dtrain $(DESTDIR)$(BINDIR)/dtrain
	install -m 644 include/dtrain.h $(DESTDIR)$(INCLUDEDIR)/dtrain.h
	install -m 644 $(BUILD)/libdtrain.a $(DESTDIR)$(LIBDIR)/libdtrain.a
	install -m 755 $(BUILD)/$(SO_REAL) $(DESTDIR)$(LIBDIR)/$(SO_REAL)
	ln -sf $(SO_REAL) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdtrain.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|-pthread $(LDLIBS)|' dtrain.pc.in \
	    > $(DESTDIR)$(PKGCONFIGDIR)/dtrain.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/dtrain.pc

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/dtrain $(DESTDIR)$(INCLUDEDIR)/dtrain.h $(DESTDIR)$(LIBDIR)/libdtrain.a \
	      $(DESTDIR)$(LIBDIR)/$(SO_REAL) $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libdtrain.so \
	      $(DESTDIR)$(PKGCONFIGDIR)/dtrain.pc

$(BUILD)/dtrain: $(MAIN_OBJ) $(BUILD)/libdtrain.a
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/dtrain-tests: $(TEST_OBJ) $(BUILD)/libdtrain.a
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The test runner finds the dtrain binary through DTRAIN_BIN for the CLI
# tests; the API tests install the shared library from beside it.
test: $(BUILD)/dtrain $(BUILD)/dtrain-tests $(BUILD)/$(SONAME)
	DTRAIN_BIN=$(CURDIR)/$(BUILD)/dtrain $(BUILD)/dtrain-tests $(TESTFLAGS)

# Everything: tests, sanitizer tests, fuzz runs; one summary line at the end.
check:
	@scripts/check.sh

# The main job: a whole cluster on this machine (1 ps, the chief, 1 worker,
# 1 evaluator) trains the cnn on Fashion-MNIST (examples/fashion_mnist.yaml).
RUN_SPEC ?= examples/fashion_mnist.yaml
run: $(BUILD)/dtrain
	$(BUILD)/dtrain launch $(RUN_SPEC)

# The same cnn in one process.
RUN_FLAGS ?= --model=cnn --problem=fashion_mnist --train_steps=4700
run-local: $(BUILD)/dtrain
	$(BUILD)/dtrain train $(RUN_FLAGS)

# A small asynchronous cluster on loopback (chief, worker, parameter server).
run-cluster: $(BUILD)/dtrain
	DTRAIN_BIN=$(BUILD)/dtrain scripts/run-cluster.sh

# libFuzzer targets: the library is compiled once with clang's coverage
# instrumentation into build-fuzz/libdtrain.a; each target links against it.
FUZZ_CFLAGS := -std=c11 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -Iinclude -Isrc $(HDF5_CFLAGS) -D_GNU_SOURCE -pthread
FUZZ_OBJ := $(LIB_SRC:%.c=build-fuzz/%.o)
build-fuzz/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CLANG   $<"
	@clang $(FUZZ_CFLAGS) -c $< -o $@
build-fuzz/libdtrain.a: $(FUZZ_OBJ)
	@rm -f $@
	@ar rcs $@ $^
build-fuzz/%: tests/fuzz/%.c build-fuzz/libdtrain.a
	@echo "  FUZZER  $@"
	@clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< build-fuzz/libdtrain.a $(LDLIBS)

FUZZ_RUNS ?= 20000
fuzz: $(FUZZ_BIN)
	@set -e; for f in $(FUZZ_BIN); do \
	  name=$$(basename $$f); mkdir -p build-fuzz/corpus-$$name; \
	  echo "fuzz: $$name ($(FUZZ_RUNS) runs, seed 1)"; \
	  $$f -seed=1 -runs=$(FUZZ_RUNS) -max_total_time=60 build-fuzz/corpus-$$name tests/fuzz/corpus/$$name 2>build-fuzz/$$name.log \
	    || { tail -40 build-fuzz/$$name.log; exit 1; }; \
	done

# Every benchmark, each beside its peer in the same run (docs/BENCHMARKS.md).
bench: $(BUILD)/dtrain $(BUILD)/bench-ps $(BUILD)/bench-ckpt $(BUILD)/bench-allreduce
	bench/train_vs_pytorch
	bench/ps
	bench/allreduce
	bench/scaling
	bench/sync
	bench/ckpt
	bench/summaries
	bench/launch

# Parameter-server throughput against a raw TCP copy (bench/ps runs it).
$(BUILD)/bench-ps: $(BUILD)/bench/ps_bench.o $(BUILD)/libdtrain.a
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Checkpoint save time against a raw write+fsync of the same bytes (bench/ckpt runs it).
$(BUILD)/bench-ckpt: $(BUILD)/bench/ckpt_bench.o $(BUILD)/libdtrain.a
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Ring all-reduce timing, run beside Open MPI and gloo by bench/allreduce.
$(BUILD)/bench-allreduce: $(BUILD)/bench/allreduce_bench.o $(BUILD)/libdtrain.a
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The per-frame cryptography alone: libsodium against OpenSSL (bench/wire_security runs it).
$(BUILD)/bench-wire-kernels: $(BUILD)/bench/wire_kernels_bench.o $(BUILD)/libdtrain.a
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# image_folder decode throughput (docs/DATA.md's Performance).
$(BUILD)/bench-images: $(BUILD)/bench/image_bench.o $(BUILD)/libdtrain.a
	@echo "  LINK    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

clean:
	rm -rf build build-san build-fuzz

BENCH_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard bench/*.c))
-include $(LIB_OBJ:.o=.d) $(MAIN_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_OBJ:.o=.d)

.SECONDARY: $(FUZZ_OBJ)
FORCE:
