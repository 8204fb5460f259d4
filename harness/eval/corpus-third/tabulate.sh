#!/bin/bash
# The third corpus's tables, regenerated from its saved runs (standard library Python only; no
# build, no measuring): results/corpus-third/tables-quiet.md and tables-one-core.md (every row of
# every case against its truth, and the two acceptance checks), buckets.md (detection by
# true-effect bucket) and the repository README's headline between its corpus-headline markers.
# The two-thread truths are the two sittings pooled (ground-truth-t2 and ground-truth-t2-late).
#
#   harness/eval/corpus-third/tabulate.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=harness/eval/results/corpus-third
T="--cases-dir harness/eval/corpus-third --ground $R/ground-truth"
T="$T --ground-sampling $R/ground-truth-sampling --ground-t2 $R/ground-truth-t2,$R/ground-truth-t2-late"
now=$(date -u '+%F %H:%M')
for cond in quiet one-core; do
  cmd="python3 harness/eval/gate_cases.py table --out $R/$cond $T"
  body=$($cmd)
  printf '# The third corpus, %s: every row of every case against its truth\n\nGenerated %s UTC by `%s`.\n\n%s\n' \
    "$cond" "$now" "$cmd" "$body" > "$R/tables-$cond.md"
done
cmd="python3 harness/eval/gate_cases.py buckets --out $R/quiet --out $R/one-core $T"
body=$($cmd)
printf '# The third corpus: detection by true-effect bucket\n\nGenerated %s UTC by `%s`.\n\n%s\n' \
  "$now" "$cmd" "$body" > "$R/buckets.md"
python3 harness/eval/gate_cases.py headline --out $R/quiet --load none --out $R/one-core \
  --load one-core $T --aa $R/aa --quick $R/quick --readme README.md
