#!/bin/bash
# Every step of the fresh corpus's procedure (README.md), in order, each resumable: the 20 cases
# (test, truths over 12 function orders, quiet, one-core), then the 20 + 20 A/A runs, then the
# quick runs of the first five cases. Rerun it after a stop: finished steps are skipped.
#
#   harness/eval/corpus-fresh/measure-all.sh HARNESS [AA_HARNESS]
#
# HARNESS: a release build of the harness, copied out of target/ so that no build replaces it
# mid-run (the cases are measured with one binary: say which commit in the session's note).
# AA_HARNESS (default HARNESS): the binary of the A/A and quick runs. They use the gate with the
# busy-machine rule (STATS.md §18), added after the cases' two-thread rows under load were seen
# and before any A/A run (README.md, "Procedure", 7).
# The gate's cache: $HARNESS_CACHE_DIR, default ~/.cache/decoder-gate/placement-cache (slots
# built through the placement linker wrapper; the first run on a new VM builds them cold).
# Every gate run here passes --no-profile, as a fresh clone's gate runs (no calibration profile).
# This file is replaced whole when edited (mv), never written in place: bash reads a running
# script as it goes.
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] && [ -x "$1" ] && [ -x "${2:-$1}" ] ||
  { echo "usage: measure-all.sh HARNESS [AA_HARNESS] (executables)" >&2; exit 2; }
H=$(realpath "$1")
AH=$(realpath "${2:-$1}")
cd "$(dirname "$0")/../../.."
R=08486bac6c3d14acb1deffda6b7b49c9625c4c26
OUT=harness/eval/results/corpus-fresh
export HARNESS_CACHE_DIR=${HARNESS_CACHE_DIR:-$HOME/.cache/decoder-gate/placement-cache}
python3 harness/eval/corpus/measure.py --corpus harness/eval/corpus-fresh --results "$OUT" \
  --placement 12 --steps test,truth,truth-sampling,truth-t2,quiet,one-core \
  --rev "$R" --harness "$H" --all
# The A/A runs compare this checkout (its own cache dir, apart from the cases' clone). On a new VM
# that cache is cold, and the first recorded run would time the builds too: while A/A runs are
# left, one discarded compare of the base with itself builds both slots first, so every recorded
# A/A run is warm, as the cases' runs are. `--rounds 2` (the fewest the gate takes) shortens only
# its first pass: the rows still open then get the suite's budget, so it takes about as long as
# an A/A run plus the cold builds (2026-12-06: 16.6 min). AA_WARM=0 skips it when this VM has
# already run an A/A compare of the same base (its cache is warm; a session that goes on where the
# last one stopped on the same VM).
if [ "${AA_WARM:-1}" != 0 ] &&
  [ "$(ls "$OUT"/aa/aa/full-*/run-*/trial.json 2>/dev/null | wc -l)" -lt 40 ]; then
  W=$(mktemp -d /tmp/aa-warm.XXXXXX)
  python3 -c "import sys; sys.path.insert(0, 'harness/eval'); import hold
hold.wait_while_held(print, 'aa warm-up')"
  echo "[$(date -u +%FT%TZ)] aa warm-up: $AH compare --suite full --rounds 2 (discarded, $W)"
  timeout 3600 "$AH" compare --repo . --base "$R" --head "$R" --suite full --rounds 2 \
    --format json --out "$W" --fail-on never --no-profile > "$W/log" 2>&1 ||
    echo "aa warm-up exited $? (log $W/log); the A/A runs go on"
fi
for load in none one-core; do
  python3 harness/eval/evaluate.py aa --rev "$R" --harness "$AH" --suite full --runs 20 \
    --load "$load" --out-dir "$OUT/aa" --harness-arg=--no-profile
done
# The quick runs use the cases' clone and its cache, cold on a new VM. While quick runs are left,
# one discarded quick run of the sixth case (not one of the five, so each recorded run builds its
# own patched head, as a pre-push check does) warms it first.
QUICK=$(python3 -c "import json; print(' '.join(list(json.load(open('harness/eval/corpus-fresh/reach.json')))[:6]))")
if [ "$(ls "$OUT"/quick/*/run-*/run.json 2>/dev/null | wc -l)" -lt 5 ]; then
  W=$(mktemp -d /tmp/quick-warm.XXXXXX)
  python3 harness/eval/gate_cases.py run --harness "$AH" --cases-dir harness/eval/corpus-fresh \
    --config harness.yaml --rev "$R" --case "${QUICK##* }:quick" --load none --out "$W" ||
    echo "quick warm-up failed ($W); the quick runs go on"
fi
for c in ${QUICK% *}; do
  [ -n "$(ls "$OUT/quick/$c"/run-*/run.json 2>/dev/null)" ] && continue
  python3 harness/eval/gate_cases.py run --harness "$AH" --cases-dir harness/eval/corpus-fresh \
    --config harness.yaml --rev "$R" --case "$c:quick" --load none --out "$OUT/quick"
done
