#!/usr/bin/env bash
# Makes sure valgrind is installed (the harness counts instructions per iteration with its
# callgrind tool: harness/src/measure/instructions.rs) and prints its version. Installs it with
# the OS package manager when missing (apt-get on Debian/Ubuntu, as root or through sudo);
# anywhere else it says what to install and fails. Progress goes to stderr.
set -euo pipefail
if ! command -v valgrind >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        sudo=""
        if [[ "$(id -u)" != 0 ]]; then sudo="sudo"; fi
        echo "installing valgrind with apt-get ..." >&2
        $sudo apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq valgrind >&2
    else
        echo "valgrind is not installed and there is no apt-get here: install valgrind" \
             "(instruction counts need its callgrind tool)" >&2
        exit 1
    fi
fi
valgrind --version
