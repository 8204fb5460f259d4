#!/bin/sh
# A/A of the e2e-tiny suite, rounds of 10 runs per side (`e2e.measurement_s: 0`) and rounds sized
# by time (e2e.yaml's `measurement_s`) alternated run by run, N runs each, in one sitting; then
# `harness noise --from` on each. Usage: e2e_sizing.sh OUT_DIR [N]
set -eu
out=$1; n=${2:-5}
here=$(dirname "$0")
mkdir -p "$out"
sed '/^e2e:/,/^[a-z]/ s/^  measurement_s: .*/  measurement_s: 0/' "$here/e2e.yaml" > "$out/e2e-runs10.yaml"
cp "$here/e2e.yaml" "$out/e2e-timed.yaml"
i=1
while [ "$i" -le "$n" ]; do
  for v in runs10 timed; do
    d="$out/$v-$i"
    echo "$(date -u +%H:%M:%S) $d" >&2
    target/release/harness compare --base HEAD --head HEAD --suite e2e-tiny \
      --config "$out/e2e-$v.yaml" --format json --out "$d" --fail-on never > /dev/null 2> "$d.stderr"
    target/release/harness noise --from "$d/results.json" > "$d/noise.md"
  done
  i=$((i + 1))
done
