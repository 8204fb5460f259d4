#!/bin/bash
# The time a one-file change of the engine costs to build, the way the gate builds a patched
# head: `cargo bench --no-run` of the quick suite's bench targets after touching
# engine/src/lib.rs (the engine library, then each bench executable, relinked). Revisions in
# turn, REPS rounds (ABAB…), so drift hits them alike; each revision in a worktree of its own
# under a scratch dir, one shared target dir (the dependencies are built once).
#
#   tools/build-time.sh REPS REV [REV…]      e.g. tools/build-time.sh 3 4b060c3 main
#
# Prints one line per build and each revision's median. The first (untimed) build of each
# revision is cold for its engine crate; on a fresh machine it also builds the dependencies.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: tools/build-time.sh REPS REV [REV...]" >&2; exit 2; }
reps=$1; shift
repo=$(git rev-parse --show-toplevel)
scratch=$(mktemp -d /tmp/build-time.XXXXXX)
export CARGO_TARGET_DIR=$scratch/target
benches=(--bench kernels --bench matmul --bench sampling --bench decode)
cleanup() {
  for d in "$scratch"/wt-*; do [ -d "$d" ] && git -C "$repo" worktree remove --force "$d"; done
  rm -rf "$scratch"
}
trap cleanup EXIT
i=0
for rev in "$@"; do
  git -C "$repo" worktree add --detach "$scratch/wt-$i" "$rev" >/dev/null 2>&1
  (cd "$scratch/wt-$i" && timeout 3600 cargo bench --no-run -p engine "${benches[@]}" -q)
  i=$((i + 1))
done
declare -A times
for r in $(seq "$reps"); do
  i=0
  for rev in "$@"; do
    touch "$scratch/wt-$i/engine/src/lib.rs"
    s=$(date +%s%N)
    (cd "$scratch/wt-$i" && timeout 3600 cargo bench --no-run -p engine "${benches[@]}" -q)
    t=$(awk -v ns=$(($(date +%s%N) - s)) 'BEGIN {printf "%.1f", ns / 1e9}')
    printf 'round %d %s %s s\n' "$r" "$rev" "$t"
    times[$i]="${times[$i]:-} $t"
    i=$((i + 1))
  done
done
i=0
for rev in "$@"; do
  printf '%s median %s s\n' "$rev" "$(echo "${times[$i]}" | tr ' ' '\n' | sed '/^$/d' | sort -n |
    awk '{a[NR]=$1} END {printf "%.1f", (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')"
  i=$((i + 1))
done
