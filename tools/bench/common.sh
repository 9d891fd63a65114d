# Sourced by the benchmark scripts: the kinfer binary to time ($KINFER, else the README's build/),
# checked once, and the model file, checked likewise.
#   source "$(dirname "$0")/common.sh"; need_kinfer; need_file "$model"
bench_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
kinfer="${KINFER:-$bench_root/build/bin/kinfer}"
need_kinfer() { [ -x "$kinfer" ] || { echo "kinfer binary not found at $kinfer (build first, or set KINFER)" >&2; exit 1; }; }
need_file() { [ -f "$1" ] || { echo "$1 not found" >&2; exit 1; }; }
