#!/bin/bash
# Every step of the third corpus's procedure (README.md), in order, each resumable: the 20 cases
# (test, truths over 12 function orders, the two-thread truth's first sitting, quiet, one-core,
# its second sitting), then the 20 + 20 A/A runs, then a quick run of every case. Rerun it after
# a stop: finished steps are skipped.
#
#   harness/eval/corpus-third/measure-all.sh HARNESS
#
# HARNESS: a release build of the harness, copied out of target/ so that no build replaces it
# mid-run (one binary for every step: say which commit in the session's note and README.md).
# The gate's cache: $HARNESS_CACHE_DIR, default ~/.cache/decoder-gate/placement-cache.
# Every gate run here passes --no-profile, as a fresh clone's gate runs (no calibration profile).
# This file is replaced whole when edited (mv), never written in place: bash reads a running
# script as it goes.
set -euo pipefail
[ $# -eq 1 ] && [ -x "$1" ] || { echo "usage: measure-all.sh HARNESS (an executable)" >&2; exit 2; }
H=$(realpath "$1")
cd "$(dirname "$0")/../../.."
R=0cca5ef20b27740918c4d1b3af75be5e317faf51
E=5dad5d4
C=harness/eval/corpus-third
OUT=harness/eval/results/corpus-third
export HARNESS_CACHE_DIR=${HARNESS_CACHE_DIR:-$HOME/.cache/decoder-gate/placement-cache}
python3 harness/eval/corpus/measure.py --corpus "$C" --results "$OUT" --engine "$E" \
  --placement 12 --steps test,truth,truth-sampling,truth-t2,quiet,one-core,truth-t2-late \
  --rev "$R" --harness "$H" --all
# A/A at the base: on a new VM (or a new base) the cache is cold, and the first recorded run
# would time the builds too: while A/A runs are left, one discarded compare of the base with
# itself builds both slots first (--rounds 2 shortens only its first pass). AA_WARM=0 skips it.
if [ "${AA_WARM:-1}" != 0 ] &&
  [ "$(ls "$OUT"/aa/aa/full-*/run-*/trial.json 2>/dev/null | wc -l)" -lt 40 ]; then
  W=$(mktemp -d /tmp/aa-warm.XXXXXX)
  python3 -c "import sys; sys.path.insert(0, 'harness/eval'); import hold
hold.wait_while_held(print, 'aa warm-up')"
  echo "[$(date -u +%FT%TZ)] aa warm-up: $H compare --suite full --rounds 2 (discarded, $W)"
  timeout 3600 "$H" compare --repo . --base "$R" --head "$R" --suite full --rounds 2 \
    --format json --out "$W" --fail-on never --no-profile > "$W/log" 2>&1 ||
    echo "aa warm-up exited $? (log $W/log); the A/A runs go on"
fi
for load in none one-core; do
  python3 harness/eval/evaluate.py aa --rev "$R" --harness "$H" --suite full --runs 20 \
    --load "$load" --out-dir "$OUT/aa" --harness-arg=--no-profile
done
# Quick runs of every case, each building its own patched head as a pre-push check does. While
# any is left, one discarded quick run of a fresh-corpus neutral patch (it applies at this base;
# not a case here) warms the cases' clone and its cache first. A case is done when one of its
# runs' `harness compare` ran (exit 0 or 1); a run that could not (exit 2) is kept, left out of
# the wall times by gate_cases.py, and the case runs again. Quick runs time the check on the host
# of the day; each run.json records it (`cpu`, `cpu_id`).
ran() {
  python3 -c 'import glob, json, sys; sys.path.insert(0, "harness/eval"); import gate_cases
sys.exit(0 if any(gate_cases.compare_ran(json.load(open(f)))
                  for f in glob.glob(sys.argv[1] + "/run-*/run.json")) else 1)' "$1"
}
left=0
for c in $(python3 -c "import json; print(' '.join(json.load(open('$C/reach.json'))))"); do
  ran "$OUT/quick/$c" || left=$((left + 1))
done
if [ "$left" -gt 0 ]; then
  W=$(mktemp -d /tmp/quick-warm.XXXXXX)
  python3 harness/eval/gate_cases.py run --harness "$H" --cases-dir harness/eval/corpus-fresh \
    --config harness.yaml --rev "$R" --case "neutral-rename-max-logit:quick" --load none \
    --out "$W" || echo "quick warm-up failed ($W); the quick runs go on"
fi
for c in $(python3 -c "import json; print(' '.join(json.load(open('$C/reach.json'))))"); do
  ran "$OUT/quick/$c" && continue
  python3 harness/eval/gate_cases.py run --harness "$H" --cases-dir "$C" \
    --config harness.yaml --rev "$R" --case "$c:quick" --load none --out "$OUT/quick"
done
