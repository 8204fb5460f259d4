"""A pause between measurements, asked for from outside: while the hold file exists, the eval
scripts wait before they start their next step (a test build, a truth, a gate run), never in the
middle of one.

Why: the corpus and A/A runs take hours on a 2-core machine, and any other CPU work beside a
measurement disturbs it (a build beside the eighth round of a gate run moved a row by +4.5 %,
results/corpus/disturbed/). Whoever needs the machine for a while (a build, a test run) makes
the file, waits for the "held" line in the scripts' log, works, and removes the file:

    touch ~/.cache/decoder-gate/eval.hold    # then wait for "held:" in the log
    ...                                      # build, test
    rm ~/.cache/decoder-gate/eval.hold       # the scripts go on

The path: $DECODER_GATE_EVAL_HOLD, default ~/.cache/decoder-gate/eval.hold. Standard library
only."""

import os
import time
from pathlib import Path


def hold_file():
    env = os.environ.get("DECODER_GATE_EVAL_HOLD")
    return Path(env) if env else Path.home() / ".cache" / "decoder-gate" / "eval.hold"


def wait_while_held(log, what, poll_s=5.0, sleep=time.sleep):
    """Returns at once when the hold file is absent; otherwise logs once that `what` is held,
    waits until the file is gone, logs how long it waited, and returns the seconds waited."""
    f = hold_file()
    if not f.exists():
        return 0.0
    log(f"held: {what} waits while {f} exists")
    started = time.time()
    while f.exists():
        sleep(poll_s)
    waited = time.time() - started
    log(f"held: {what} goes on after {waited / 60:.1f} min")
    return waited
