# adjoint: the README's commands.
#   make demo    install missing Debian packages, build Release, train the default small GPT
#   make test    same setup, then every test through ctest
#   make bench   build the benchmark and the libtorch reference, run them side by side
#   make asan    AddressSanitizer + UndefinedBehaviorSanitizer build running the suite
#   make tsan    ThreadSanitizer build running the concurrency tests
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan

.PHONY: all deps build demo test bench asan tsan clean format

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
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	@bash bench/run.sh $(BUILD)

asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DADJOINT_SANITIZE=ON \
	  -DADJOINT_BUILD_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 1200 -LE slow

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
	@rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)

format:
	@git ls-files '*.cpp' '*.h' | xargs clang-format -i
