# adjoint: the README's commands.
#   make demo    install missing Debian packages, build Release, train the default small GPT
#   make test    same setup, then every test through ctest
#   make bench   build the benchmark and the libtorch reference, run them side by side
#   make asan    AddressSanitizer + UndefinedBehaviorSanitizer build running the suite
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan

.PHONY: all deps build demo test bench asan clean format

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

clean:
	@rm -rf $(BUILD) $(ASAN_BUILD)

format:
	@git ls-files '*.cpp' '*.h' | xargs clang-format -i
