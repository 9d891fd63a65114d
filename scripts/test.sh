#!/usr/bin/env bash
# The whole test suite: the Release build's doctest suites, the same suites under
# AddressSanitizer + UndefinedBehaviorSanitizer, and a bounded libFuzzer run of every parser.
# Exits non-zero on any failure. Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
FUZZ_SECONDS=${KINFER_FUZZ_SECONDS:-30}
# The sanitizer and fuzzing builds compile at -O1 with line tables only: half the compile time of
# -O2 -g on the json-heavy files (CI has two cores and a 15-minute budget), same diagnostics.
DEBUG_FLAGS=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG")

KINFER_SETUP_NO_RUN=1 scripts/setup.sh

# Each ctest run's "N% tests passed, F tests failed out of T" line is kept for the summary.
PASSED=0
run_ctest() {
    local log
    log=$(mktemp)
    ctest --test-dir "$1" --output-on-failure -j"$JOBS" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local total
    total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n1)
    rm -f "$log"
    if [ "$rc" -ne 0 ] || [ -z "$total" ] || [ "$total" -eq 0 ]; then
        echo "ctest in $1 failed or ran no test"
        exit 1
    fi
    PASSED=$((PASSED + total))
}

echo "== Release suites"
run_ctest build

echo "== ASan + UBSan suites"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${DEBUG_FLAGS[@]}" -DKINFER_SANITIZE=ON -DKINFER_CUDA=OFF >/dev/null
cmake --build build-asan -j"$JOBS"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 KINFER_SANITIZED=1
run_ctest build-asan
unset ASAN_OPTIONS UBSAN_OPTIONS KINFER_SANITIZED

echo "== libFuzzer (${FUZZ_SECONDS}s per target)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${DEBUG_FLAGS[@]}" -DKINFER_FUZZ=ON \
    -DKINFER_TESTS=ON -DKINFER_CUDA=OFF >/dev/null
cmake --build build-fuzz -j"$JOBS" --target $(cd tests/fuzz && ls fuzz_*.cpp 2>/dev/null | sed 's/\.cpp$//' | tr '\n' ' ')
for f in tests/fuzz/fuzz_*.cpp; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .cpp)
    corpus=tests/fuzz/corpus/${name#fuzz_}
    work=$(mktemp -d)
    [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
    echo "-- $name"
    ./build-fuzz/tests/$name "$work" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -rss_limit_mb=2048 \
        -print_final_stats=1 2>&1 | tail -n 12
    rm -rf "$work"
done
echo "== all suites passed"
echo "ctest: $PASSED passed, 0 failed"
