# adjoint: the README's commands.
#   make demo    install missing Debian packages, build Release, train the default small GPT
#   make test    same setup, then every test through ctest (the mpi label under mpirun -np 2)
#   make bench   build the benchmark and the libtorch reference, run them side by side
#   make asan    AddressSanitizer + UndefinedBehaviorSanitizer build running the suite, then
#                a short run of each fuzz target (ASAN_FUZZ_SECONDS each)
#   make tsan    ThreadSanitizer build running the concurrency tests
#   make fuzz    build the libFuzzer targets with clang (ASan + UBSan) and run each for
#                FUZZ_SECONDS over its seed corpus (docs/fuzzing.md)
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
ASAN_FUZZ_SECONDS ?= 60
# The graph-picture tests render with Graphviz's dot and run the step-through page in headless
# Chromium (tests/debug); without them those tests skip, saying so.
TEST_DEPS = graphviz chromium
# Only the fuzz targets need these (make test does not).
FUZZ_DEPS = clang libclang-rt-14-dev

.PHONY: all deps build demo test bench asan tsan fuzz-build fuzz fuzz-seeds clean format

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: a byte-level GPT trained on the license texts of /usr/share/common-licenses
# (package base-files); checkpoint, loss curve and sample go to $(DEMO_OUT).
DEMO_OUT ?= out
demo: build
	@./$(BUILD)/tools/adjoint-train --out $(DEMO_OUT)

test: build
	@bash scripts/install-deps.sh $(TEST_DEPS)
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	@bash bench/run.sh $(BUILD)

asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DADJOINT_SANITIZE=ON \
	  -DADJOINT_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 1200 -LE slow
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(ASAN_FUZZ_SECONDS)

fuzz-build:
	@bash scripts/install-deps.sh $(FUZZ_DEPS)
	@cmake -S . -B $(FUZZ_BUILD) -C fuzz/fuzz.cmake >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_loaders fuzz_ops fuzz_import

# Runs each target for FUZZ_SECONDS; new inputs go under $(FUZZ_BUILD)/fuzz-work, not the repo.
fuzz: fuzz-build
	@bash fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# Rewrites the seed corpora in fuzz/corpus (after a change to the program format or loaders);
# the regress_* inputs kept from findings stay.
fuzz-seeds: fuzz-build
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_seeds
	@find fuzz/corpus/loaders fuzz/corpus/ops fuzz/corpus/import -type f ! -name 'regress_*' -delete 2>/dev/null || true
	@ASAN_OPTIONS=detect_leaks=0 ./$(FUZZ_BUILD)/fuzz/fuzz_seeds fuzz/corpus

# Backward on several threads (tests/autograd/concurrency_test.cpp, more iterations than in
# make test) and the thread pool, under ThreadSanitizer. OpenBLAS is not instrumented: it runs
# on one thread here so that its own workers cannot hide or fake a race.
TSAN_TESTS ?= test_concurrency test_parallel
tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DADJOINT_TSAN=ON \
	  -DADJOINT_BUILD_BENCH=OFF -DADJOINT_BUILD_EXAMPLES=OFF >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TESTS)
	@for t in $(TSAN_TESTS); do \
	  echo "== $$t (ThreadSanitizer)"; \
	  OPENBLAS_NUM_THREADS=1 ADJOINT_CONCURRENCY_ITERS=2000 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	    ./$(TSAN_BUILD)/tests/$$t || exit 1; \
	done

clean:
	@rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)

format:
	@git ls-files '*.cpp' '*.h' | xargs clang-format -i
