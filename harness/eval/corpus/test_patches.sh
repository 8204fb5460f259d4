#!/bin/sh
# Step 1 of the corpus procedure (README.md): each patch applied alone on REV, `cargo test -p
# engine`, the result into OUT/<case>.txt (the test output's tail and the exit status). Cases
# with a result already are skipped, so an interrupted run resumes. One throwaway worktree under
# /tmp and its own target dir (no incremental state: a build killed mid-write once left it
# corrupt, and four cases then failed to link); the repository's working tree is not touched.
# Usage: harness/eval/corpus/test_patches.sh REV OUT [CASE...]
set -u
rev=$1; out=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
wt=/tmp/corpus-test-wt
mkdir -p "$out"
git -C "$repo" worktree remove --force "$wt" 2>/dev/null
git -C "$repo" worktree add -q --detach "$wt" "$rev" || exit 2
trap 'git -C "$repo" worktree remove --force "$wt"' EXIT
cases=${*:-$(cd "$here" && ls *.patch | sed 's/\.patch$//')}
for c in $cases; do
  [ -s "$out/$c.txt" ] && continue
  git -C "$wt" reset -q --hard "$rev" && git -C "$wt" clean -qfd
  if ! git -C "$wt" apply "$here/$c.patch"; then
    echo "$c: does not apply at $rev" > "$out/$c.txt"; continue
  fi
  start=$(date +%s)
  # An hour: the first case builds every dependency in debug, and the SmolLM2 goldens take
  # 3-4 min in debug (a case after the first takes about 6 min in all).
  (cd "$wt" && CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$repo/target/corpus-test" timeout 3600 cargo test -p engine 2>&1) > "$out/$c.log"
  rc=$?
  if [ $rc -eq 124 ]; then
    # A timeout is no result: the case runs again on the next invocation.
    echo "$c: timed out after 3600 s (no result kept)"; rm -f "$out/$c.log"; continue
  fi
  { echo "$c: cargo test -p engine exit $rc in $(( $(date +%s) - start )) s at $rev"
    grep -E "^test result:|FAILED|panicked" "$out/$c.log" | head -40; } > "$out/$c.txt"
  rm -f "$out/$c.log"
  echo "$(cat "$out/$c.txt" | head -1)"
done
