#!/bin/bash
# The quick-time measurement (README.md, "Procedure"), each step resumable: rerun it after a
# stop and the saved runs are skipped.
#
#   harness/eval/results/quick-time/run.sh HARNESS
#
# HARNESS: a release build of the harness at BASE (it knows `e2e_timed`), copied out of target/
# so that no build replaces it mid-run. The gate's cache: $HARNESS_CACHE_DIR, default
# ~/.cache/decoder-gate/placement-cache (the corpus's), the work clone gate_cases.py's default.
# This file is replaced whole when edited (mv), never written in place: bash reads a running
# script as it goes.
set -euo pipefail
[ $# -eq 1 ] && [ -x "$1" ] || { echo "usage: run.sh HARNESS (an executable)" >&2; exit 2; }
H=$(realpath "$1")
cd "$(dirname "$0")/../../../.."
BASE=15b4ff343c5ed3bd0f3a7354394a16563138ef9e
OUT=harness/eval/results/quick-time
CASES=harness/eval/corpus-fresh
export HARNESS_CACHE_DIR=${HARNESS_CACHE_DIR:-$HOME/.cache/decoder-gate/placement-cache}
FRESH="gemm-column-block-joins kv-free-list-lowest-first bpe-word-cache-off
  top-k-trim-at-five-quarters gather-row-vecs draw-chunk-lanes-vec exec-values-hashmap
  tensor-storage-ids neutral-rename-max-logit neutral-reorder-kv-geometry-fields
  neutral-move-gemm-one neutral-split-bcast-full-strides neutral-move-text-codec-encode-decode
  neutral-reorder-fused-primitive-arms"
SEEN="attention-keys-transposed-copy panels-three-of-thirty-two reduce-widen-input-first
  sampler-nan-scrub-copy"
quick() {
  python3 harness/eval/gate_cases.py run --harness "$H" --cases-dir "$CASES" \
    --config harness.yaml --rev "$BASE" --case "$1:quick" --load none --out "$2"
}
done_in() { [ -n "$(ls "$OUT/$2/$1"/run-*/run.json 2>/dev/null)" ]; }
# Before the first recorded run on this VM only: once one is saved, the slots are warm.
if [ -z "$(ls "$OUT"/fresh/*/run-*/run.json "$OUT"/seen/*/run-*/run.json 2>/dev/null)" ]; then
  W=$(mktemp -d /tmp/quick-time-warm.XXXXXX)
  echo "[$(date -u +%FT%TZ)] warm-up: gemv-blocks-panel-groups (discarded, $W)"
  quick gemv-blocks-panel-groups "$W" || echo "warm-up failed ($W); the runs go on"
fi
for c in $FRESH; do done_in "$c" fresh || quick "$c" "$OUT/fresh"; done
for c in $SEEN; do done_in "$c" seen || quick "$c" "$OUT/seen"; done
