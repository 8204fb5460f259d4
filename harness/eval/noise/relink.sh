#!/bin/bash
# The same compiled benchmarks linked in several function orders, for link_order.py.
#
#   relink.sh REV OUT_DIR SEEDS BENCH... (SEEDS e.g. 1,2,3,4,5; a target dir may be given in
#   CARGO_TARGET_DIR to reuse an earlier build of REV)
#   relink.sh TREE OUT_DIR SEEDS BENCH... (TREE a directory: a prepared source tree, e.g. with a
#   corpus patch applied, used as it is; ground_truth.py --placement)
#   A BENCH written `bin:NAME` is the engine package's binary NAME, release profile (the
#   `engine` the e2e checks run), linked the same way into OUT/NAME-sN.
#
# Per bench target: `cargo bench --no-run` at REV (a throwaway `git clone --shared`), then
# `cargo rustc` of the bench crate alone with `-C save-temps --print link-args`, which keeps its
# object files and prints the linker command; that command is run again once per seed with
# lld's `-Wl,--shuffle-sections=*=SEED` (rustc links x86_64-unknown-linux-gnu with its own lld
# since Rust 1.90, and puts every function in a section of its own, so the seed reorders every
# function of the program, the engine's included). `OUT/<bench>-s0` is the unshuffled link
# (byte-identical to cargo's), `OUT/<bench>-sN` seed N; all stripped. Nothing is recompiled per
# seed: the code of every function is the same bytes, only where it lies changes.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: relink.sh REV OUT_DIR SEEDS BENCH..." >&2; exit 2; }
rev=$1 out=$(realpath -m "$2") seeds=${3//,/ }
shift 3
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d /tmp/relink.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ -d "$rev" ]; then
  src=$(realpath "$rev")
else
  git clone -q --shared --no-checkout "$repo" "$work/src"
  git -C "$work/src" checkout -q --detach "$rev"
  src=$work/src
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$work/target}
mkdir -p "$out"
cd "$src"
for b in "$@"; do
  if [[ $b == bin:* ]]; then
    b=${b#bin:}
    timeout 3600 cargo build --release -q -p engine --bin "$b"
    timeout 1800 cargo rustc -q --release -p engine --bin "$b" -- -C save-temps \
      --print link-args > "$work/link-$b.txt"
  else
    timeout 3600 cargo bench --no-run -q -p engine --bench "$b"
    timeout 1800 cargo rustc -q --profile bench -p engine --bench "$b" -- -C save-temps \
      --print link-args > "$work/link-$b.txt"
  fi
  exe=$(grep -o '"-o" "[^"]*"' "$work/link-$b.txt" | sed 's/"-o" //; s/"//g')
  [ -n "$exe" ] || { echo "error: no -o in the link command of $b" >&2; exit 1; }
  grep -q -- '-fuse-ld=lld' "$work/link-$b.txt" ||
    { echo "error: $b is not linked by lld (--shuffle-sections needs it)" >&2; exit 1; }
  for s in 0 $seeds; do
    cmd=$(sed "s#\"-o\" \"$exe\"#\"-o\" \"$out/$b-s$s\"#" "$work/link-$b.txt")
    [ "$s" = 0 ] || cmd="$cmd \"-Wl,--shuffle-sections=*=$s\""
    timeout 600 bash -c "$cmd"
    strip "$out/$b-s$s"
  done
  echo "$b: $(ls "$out"/"$b"-s* | wc -l) links in $out"
done
