#!/bin/sh
# Step 1 of the corpus procedure (README.md): patches applied on REV, `cargo test -p engine`,
# the result into OUT/<case>.txt (the exit status and the test summary lines). A CASE argument
# is one patch, or a batch `a+b+c` of patches that touch different files: applied together and
# tested once; then each of them alone gets `cargo check -p engine --all-targets` (it still
# builds on its own), and its OUT/<case>.txt holds the batch's test result and its own check.
# Cases with a result already are skipped, so an interrupted run resumes. One throwaway worktree
# under /tmp and its own target dir (no incremental state: a build killed mid-write once left it
# corrupt, and four cases then failed to link); the repository's working tree is not touched.
# Usage: harness/eval/corpus/test_patches.sh REV OUT [CASE|a+b+c ...]
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

# fresh PATCH...: the worktree at REV with these patches applied (status 1 if one does not apply)
fresh() {
  git -C "$wt" reset -q --hard "$rev" && git -C "$wt" clean -qfd || exit 2
  for p in "$@"; do
    git -C "$wt" apply "$here/$p.patch" || { echo "$p: does not apply at $rev"; return 1; }
  done
}

# cargo_in LOG TIMEOUT ARGS...: cargo in the worktree, its output into LOG; the exit status
cargo_in() {
  log=$1; shift
  (cd "$wt" && CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$repo/target/corpus-test" timeout 3600 cargo "$@" 2>&1) > "$log"
}

for c in $cases; do
  patches=$(echo "$c" | tr '+' ' ')
  todo=no
  for p in $patches; do [ -s "$out/$p.txt" ] || todo=yes; done
  [ $todo = yes ] || continue
  # shellcheck disable=SC2086
  if ! why=$(fresh $patches); then
    for p in $patches; do echo "$why (with: $c)" > "$out/$p.txt"; done; continue
  fi
  start=$(date +%s)
  cargo_in "$out/test.log" test -p engine
  rc=$?
  if [ $rc -eq 124 ]; then
    # A timeout is no result: the case runs again on the next invocation.
    echo "$c: timed out after 3600 s (no result kept)"; rm -f "$out/test.log"; continue
  fi
  summary="cargo test -p engine exit $rc in $(( $(date +%s) - start )) s at $rev"
  tail=$(grep -E "^test result:|FAILED|panicked" "$out/test.log" | head -40)
  rm -f "$out/test.log"
  for p in $patches; do
    if [ "$p" = "$c" ]; then
      printf '%s: %s\n%s\n' "$p" "$summary" "$tail" > "$out/$p.txt"
    else
      fresh "$p" > /dev/null
      cargo_in "$out/check.log" check -q -p engine --all-targets
      crc=$?
      { printf '%s: tested together with the batch %s: %s\n%s\n' "$p" "$c" "$summary" "$tail"
        echo "$p alone: cargo check -p engine --all-targets exit $crc"
        tail -20 "$out/check.log"; } > "$out/$p.txt"
      rm -f "$out/check.log"
    fi
    head -1 "$out/$p.txt"
  done
done
