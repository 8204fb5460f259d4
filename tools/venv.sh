#!/usr/bin/env bash
# Creates (once) the project's lint-tool venv and prints its directory:
#
#     PATH="$(tools/venv.sh)/bin:$PATH" actionlint
#
# Same approach as goldens/venv.py: the venv lives in .venv/tools (git-ignored), needs only
# Python 3 with pip, and is rebuilt when tools/requirements.txt changes (its sha256 is stamped in
# the venv). Progress goes to stderr, the path to stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv/tools"
reqs="$root/tools/requirements.txt"
stamp="$venv/requirements.sha256"
want="$(sha256sum "$reqs" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "setting up .venv/tools from tools/requirements.txt ..." >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$reqs" >&2
    echo "$want" >"$stamp"
fi
echo "$venv"
