# Initial cache for the fuzzing build (cmake -C fuzz/fuzz.cmake -S . -B build-fuzz): clang, the
# whole library instrumented for libFuzzer's coverage (fuzzer-no-link) with AddressSanitizer and
# UndefinedBehaviorSanitizer, any UB report fatal, and only the fuzz targets built. The fuzz
# targets themselves link with -fsanitize=fuzzer (fuzz/CMakeLists.txt). See docs/fuzzing.md.
set(CMAKE_CXX_COMPILER clang++ CACHE STRING "")
set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "")
# clang's -fsanitize=undefined already holds float-cast-overflow (GCC's does not); it is named
# anyway so that the intent survives a change of compiler. -fno-sanitize-recover=all: UB aborts,
# so libFuzzer stops and saves the input instead of printing a report and going on.
set(CMAKE_CXX_FLAGS
    "-fsanitize=fuzzer-no-link,address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer"
    CACHE STRING "")
set(CMAKE_EXE_LINKER_FLAGS "-fsanitize=address,undefined" CACHE STRING "")
set(ADJOINT_FUZZ ON CACHE BOOL "")
set(ADJOINT_BUILD_TESTS OFF CACHE BOOL "")
set(ADJOINT_BUILD_EXAMPLES OFF CACHE BOOL "")
set(ADJOINT_BUILD_BENCH OFF CACHE BOOL "")
