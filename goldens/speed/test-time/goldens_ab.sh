#!/usr/bin/env bash
# Wall time of the engine's `tests/goldens.rs` (greedy decodes of SmolLM2 and the tiny model,
# engine and oracle, dev profile as `cargo test --workspace` builds it) at two commits, ABAB.
#   goldens/speed/test-time/goldens_ab.sh BEFORE AFTER [PAIRS]
# Each commit's test binary is built in a git worktree (the shared target dir, so only the engine
# crate recompiles) and copied out; the worktrees stay until the runs end (the binaries read
# goldens/ next to their own sources). Prints one line per run.
set -euo pipefail
before=$1 after=$2 pairs=${3:-3}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'for c in before after; do git -C "$root" worktree remove --force "$work/$c" 2>/dev/null || true; done; rm -rf "$work"' EXIT
for c in before after; do
  rev=${!c}
  git -C "$root" worktree add -q --detach "$work/$c" "$rev"
  exe=$(cd "$work/$c" && CARGO_TARGET_DIR="$root/target" timeout 1800 cargo test -p engine --test goldens --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="goldens"][-1])')
  cp "$exe" "$work/$c.bin"
  echo "$c = $(git -C "$root" rev-parse --short "$rev")"
done
for i in $(seq "$pairs"); do
  for c in before after; do
    t0=$(date +%s.%N)
    (cd "$work/$c/engine" && timeout 900 "$work/$c.bin" -q > "$work/$c.log" 2>&1) || { echo "$c failed:"; tail "$work/$c.log"; exit 1; }
    t1=$(date +%s.%N)
    echo "$c run $i: $(python3 -c "print(f'{$t1 - $t0:.2f}')") s ($(grep -o 'test result: .*passed' "$work/$c.log"))"
  done
done
