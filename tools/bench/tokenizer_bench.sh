#!/usr/bin/env bash
# Tokenizer speed: encodes each corpus with a GGUF's vocabulary on one core and prints MB/s
# (`kinfer tokenize --timing --quiet`: the time of Tokenizer::encode alone, a fresh tokenizer per
# file, so the piece cache starts cold). Target: >= 20 MB/s on English text.
#   tools/bench/tokenizer_bench.sh [kinfer binary] [model.gguf] [files...]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/bin/kinfer}
model=${2:-$root/tests/data/models/k3-tiny-a-Q4_K_M.gguf}
shift $(( $# > 2 ? 2 : $# )) || true
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for f in gpl-3.txt kjv_bible.txt python311_docs_rst.txt fortunes_all.txt dict-devil.txt; do
    [ -f "$root/../shared/corpora/$f" ] && files+=("$root/../shared/corpora/$f")
  done
  [ ${#files[@]} -eq 0 ] && files=("$root/tests/data/text/gpl-3.txt")
fi
echo "model: $model"
for f in "${files[@]}"; do
  for run in 1 2 3; do
    taskset -c 0 "$bin" tokenize -m "$model" -f "$f" --timing --quiet 2>&1 | sed "s|^tokenize|$(basename "$f") run $run|"
  done
done
