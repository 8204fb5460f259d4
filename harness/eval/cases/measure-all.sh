#!/usr/bin/env bash
# The whole measurement of the realistic cases, in the order it was run: ground truth for every
# case (long interleaved criterion runs, apart from the gate), then every case through the gate
# (harness/eval/cases/gate.yaml), then an A/A run of the repository's own full and quick suites
# under harness.yaml (the wall-time budgets). Run on a quiet machine from the repository root,
# after `cargo build --release -p harness`; nothing else should build or run meanwhile.
# Steps whose output exists are skipped, so the script resumes after an interruption.
set -euo pipefail
cd "$(dirname "$0")/../../.."
H=target/release/harness
GT=harness/eval/results/ground-truth
OUT=harness/eval/results/cases
AA=harness/eval/results/aa-resolution

truth() { # case, targets, filter, rounds
  [ -f "$GT/$1/ground-truth.json" ] && return 0
  python3 harness/eval/ground_truth.py --case "$1" --targets "$2" --filter "$3" --rounds "$4"
}
truth add-extra-copy kernels '^(add/|reduce_mean/f32/)' 15
truth matmul-small-gemm-unthreaded matmul '^matmul/(f32|f16|bf16)_t2/|^matmul/f32_t1/32x512x512' 12
truth neutral-move-ipow kernels '^add/(f32|bf16)/' 8
truth neutral-move-top-p-buckets sampling '' 8

for c in gather-element-loop:case-kernels add-extra-copy:case-kernels \
         neutral-move-ipow:case-kernels matmul-small-gemm-unthreaded:case-matmul \
         sampling-top-p-one-histogram:case-sampling neutral-move-top-p-buckets:case-sampling; do
  [ -d "$OUT/${c%%:*}/run-001" ] && continue
  python3 harness/eval/gate_cases.py run --harness "$H" --case "$c"
done

aa() { # suite
  { [ -f "$AA/$1/results.json" ] || [ -f "$AA/$1/results.json.gz" ]; } && return 0
  mkdir -p "$AA/$1"
  local t0=$SECONDS
  timeout 7200 "$H" compare --base HEAD --head HEAD --suite "$1" --fail-on never --format json \
      --out "$AA/$1" > /dev/null 2> "$AA/$1/stderr.txt"
  echo "{\"suite\": \"$1\", \"wall_s\": $((SECONDS - t0))}" > "$AA/$1/wall.json"
  # Saved runs are kept compressed (harness/eval/saved.py).
  python3 -c 'import sys; sys.path.insert(0, "harness/eval"); import saved; saved.compress_saved(sys.argv[1])' "$AA/$1/results.json"
}
# Once untimed first, so both slots are built at HEAD and the tiny model is provisioned: the
# budgets are about warm runs.
if [ ! -f "$AA/warm.done" ]; then
  mkdir -p "$AA"
  # Two rounds (the fewest it takes), no further rounds: building is what this run is for.
  sed -e 's/^  rule: resolution/  rule: threshold/' \
      -e 's/^  noise_rounds: 6/  noise_rounds: 0/' harness.yaml > "$AA/warm-harness.yaml"
  timeout 7200 "$H" compare --config "$AA/warm-harness.yaml" --base HEAD --head HEAD --suite full \
      --rounds 2 --fail-on never --format json > /dev/null 2> "$AA/warm-stderr.txt" || true
  touch "$AA/warm.done"
fi
aa quick
aa full
