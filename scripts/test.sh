#!/usr/bin/env bash
# The whole test suite: the Release build's doctest suites (at the best ISA level, then again with
# KINFER_ISA=avx2 where that is a lower level, less the slow suites that do not depend on it), the same suites under AddressSanitizer +
# UndefinedBehaviorSanitizer, and a bounded libFuzzer run of every fuzz target from that build. Exits non-zero on any failure; the last line is
# "ctest: N passed, 0 failed, S skipped" (doctest cases). Used by .ci/run (CI=true: no golden skips).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
FUZZ_SECONDS=${KINFER_FUZZ_SECONDS:-20}
# The sanitizer and fuzzing builds compile at -O1 with line tables only: half the compile time of
# -O2 -g on the json-heavy files (CI has two cores, and the suite 25 minutes there), same diagnostics.
DEBUG_FLAGS=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG")

KINFER_SETUP_NO_RUN=1 scripts/setup.sh

# Each ctest run leaves one line per doctest case in <build>/test-report/*.tsv (tests/test_main.cpp):
# case, pass / fail / skip, the skip kinds (golden, tool, machine) and the first reason. The totals
# are summed over the runs for the last line. With CI=true a case skipped for a missing golden
# file or a missing setup.sh tool fails the run (../shared and the packages are there in CI); a
# case skipped for a missing CPU feature is counted but allowed.
PASSED=0
FAILED_CASES=0
SKIPPED=0
run_ctest() {
    local dir=$1 label=$2
    shift 2
    local log
    log=$(mktemp)
    rm -rf "$dir/test-report"
    ctest --test-dir "$dir" --output-on-failure -j"$JOBS" "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local total
    total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n1)
    rm -f "$log"
    if [ "$rc" -ne 0 ] || [ -z "$total" ] || [ "$total" -eq 0 ]; then
        echo "ctest in $dir failed or ran no test"
        exit 1
    fi
    local reports=("$dir"/test-report/*.tsv)
    if [ ! -e "${reports[0]}" ]; then
        echo "ctest in $dir wrote no per-case report ($dir/test-report)"
        exit 1
    fi
    local p f s
    p=$(cat "${reports[@]}" | awk -F'\t' '$2 == "pass"' | wc -l)
    f=$(cat "${reports[@]}" | awk -F'\t' '$2 == "fail"' | wc -l)
    s=$(cat "${reports[@]}" | awk -F'\t' '$2 == "skip"' | wc -l)
    echo "-- $label: $p cases passed, $f failed, $s skipped"
    if [ "$s" -gt 0 ]; then
        for r in "${reports[@]}"; do
            awk -F'\t' -v t="$(basename "$r" .tsv)" '$2 == "skip" { printf "   skipped (%s) %s: %s -- %s\n", $3, t, $1, $4 }' "$r"
        done
    fi
    local required
    required=$(cat "${reports[@]}" | awk -F'\t' '$2 == "skip" && ($3 ~ /golden/ || $3 ~ /tool/)' | wc -l)
    if [ "${CI:-}" = true ] && [ "$required" -gt 0 ]; then
        echo "CI: $required case(s) skipped for a missing golden file or tool (CI has ../shared and setup.sh's packages)"
        exit 1
    fi
    PASSED=$((PASSED + p))
    FAILED_CASES=$((FAILED_CASES + f))
    SKIPPED=$((SKIPPED + s))
}

if [ "${CI:-}" = true ] && [ ! -d ../shared/golden ]; then
    echo "CI: ../shared/golden is missing; the golden-dependent cases would all skip"
    exit 1
fi

# test_cuda's kernel cases under the CPU mode's other schedules (tests/CMakeLists.txt registers
# one ctest each); they look for races by their results, so one build's run is enough.
CPU_MODE_SCHEDULES='cuda_reverse|cuda_warps|cuda_warps_reverse'

echo "== Release suites"
# cli_parity and cuda_kernels are parts of cli and cuda, registered on their own for the
# KINFER_ISA=avx2 pass below.
run_ctest build "Release" -E '^(cli_parity|cuda_kernels)$'

# The same build with the AVX2 kernels forced: every parity bound is held at this level too
# (the per-type bounds in tests/model/parity_util.h), and the AVX2 kernels run end to end. On a
# CPU without the AVX-512 set kinfer uses, the first pass already ran at AVX2: not run twice.
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo &&
   grep -qw avx512dq /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo; then
    echo "== Release suites, KINFER_ISA=avx2"
    # Once is enough for what does not depend on the ISA level: tests/reference (PyTorch against
    # llama.cpp), the CPU mode's other schedules and the cubins' shared memory (test_cuda's first
    # run still compares the CUDA kernels with this level's CPU ops), the MPI ranks' plans and
    # parity with one process (dist, one thread a rank, split by experts and layers), the CLI's
    # behaviour (cli: its checks that depend on the level run as cli_parity), the CUDA backend on
    # the emulated runtime against llama.cpp's logits (cuda: its kernel cases, which compare with
    # this level's CPU ops, run as cuda_kernels). About 150 s of the 2-core CI's time, and the
    # emulated-runtime cases 30 s of this pass's wall time here (101 s with them, 64-72 without).
    KINFER_ISA=avx2 run_ctest build "Release, KINFER_ISA=avx2" -E "^(reference|$CPU_MODE_SCHEDULES|cuda_static_smem|gpu_scripts|dist|cli|cuda)\$"
else
    echo "== Release suites, KINFER_ISA=avx2: not run (this CPU lacks AVX-512, the pass above ran AVX2)"
fi

# One clang build serves both the sanitizer suites and the fuzzers: every library is compiled
# with ASan + UBSan, and the parsers' libraries (those the fuzz targets' inputs reach) with
# libFuzzer's coverage instrumentation too (tests/CMakeLists.txt; on the kernels it doubled the
# suites' time), so the tree is compiled twice in CI (Release, sanitized), not three times.
echo "== ASan + UBSan suites"
CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${DEBUG_FLAGS[@]}" \
    -DKINFER_SANITIZE=ON -DKINFER_FUZZ=ON -DKINFER_CUDA=OFF >/dev/null
cmake --build build-asan -j"$JOBS"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 KINFER_SANITIZED=1
# The CPU mode's other schedules ran in the Release suites (130 s of CI's time under ASan).
run_ctest build-asan "ASan + UBSan" -E "^(reference|$CPU_MODE_SCHEDULES|cli_parity|cuda_kernels)\$"
unset ASAN_OPTIONS UBSAN_OPTIONS KINFER_SANITIZED

# The fuzz targets run $JOBS at a time (each is single-threaded), each for FUZZ_SECONDS.
echo "== libFuzzer (${FUZZ_SECONDS}s per target, $JOBS at a time)"
fuzz_one() {
    local name=$1 corpus=tests/fuzz/corpus/${1#fuzz_} work
    # fuzz_info reads the same files as fuzz_gguf (GGUF headers): one seed corpus serves both.
    [ "$name" = fuzz_info ] && corpus=tests/fuzz/corpus/gguf
    work=$(mktemp -d)
    [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
    local rc=0
    ./build-asan/tests/$name "$work" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -rss_limit_mb=2048 -timeout=25 \
        -print_final_stats=1 -artifact_prefix="$work/" > "$work.log" 2>&1 || rc=$?
    { echo "-- $name"; tail -n 12 "$work.log"; } > "$work.summary"
    if [ "$rc" -ne 0 ]; then
        echo "$name failed (exit $rc); the input is in $work" >> "$work.summary"
        cat "$work.summary"
        return 1
    fi
    cat "$work.summary"
    rm -rf "$work" "$work.log" "$work.summary"
}
FUZZ_TARGETS=0
FUZZ_FAILED=0
pids=()
for f in tests/fuzz/fuzz_*.cpp; do
    [ -e "$f" ] || continue
    fuzz_one "$(basename "$f" .cpp)" &
    pids+=($!)
    FUZZ_TARGETS=$((FUZZ_TARGETS + 1))
    if [ "${#pids[@]}" -ge "$JOBS" ]; then
        wait "${pids[0]}" || FUZZ_FAILED=$((FUZZ_FAILED + 1))
        pids=("${pids[@]:1}")
    fi
done
for p in "${pids[@]}"; do
    wait "$p" || FUZZ_FAILED=$((FUZZ_FAILED + 1))
done
if [ "$FUZZ_FAILED" -ne 0 ]; then
    echo "fuzz: $FUZZ_FAILED of $FUZZ_TARGETS targets found something"
    exit 1
fi
echo "== fuzz: $FUZZ_TARGETS targets, no finding"
if [ "$FAILED_CASES" -ne 0 ]; then
    echo "$FAILED_CASES doctest case(s) failed"
    exit 1
fi
echo "== all suites passed (doctest cases, summed over the ctest runs)"
echo "ctest: $PASSED passed, 0 failed, $SKIPPED skipped"
