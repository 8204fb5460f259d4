"""Killing a child of the eval scripts together with everything it started.

`harness compare` starts every child (cargo, a bench process, a decode) as the leader of a
process group of its own, so that its own deadlines kill whole groups (harness/src/process.rs).
Those deadlines are threads of the harness: when a script kills the harness at the script's
deadline, its children's groups would run on (a cargo build, a serving benchmark) beside the
next run. `kill_tree` finds every descendant first (/proc), then kills the process and each
descendant's group. `run` is `subprocess.run` with that kill at its deadline (the standard
library's kills the child alone: a script's deadline on cargo or on another script would leave
the compilers or the harness running). Standard library only; Linux (/proc), as the runners
are."""

import os
import signal
import subprocess
from pathlib import Path


def descendants(pid, proc=Path("/proc")):
    """The pids below `pid` (children, their children, …) as /proc shows them now."""
    parent = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            # The command name may hold spaces and parentheses: the fields after its last ")".
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parent[int(d.name)] = int(fields[1])
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        frontier += kids
    return out


def kill_tree(pid):
    """SIGKILL `pid`, every descendant, and the process group each descendant leads or belongs
    to (never this script's own group). Quiet about processes that are already gone."""
    below = descendants(pid)
    own = os.getpgrp()
    groups = set()
    for p in below:
        try:
            groups.add(os.getpgid(p))
        except OSError:
            pass
    for p in [pid] + below:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    for g in groups - {own}:
        try:
            os.killpg(g, signal.SIGKILL)
        except OSError:
            pass


def run(cmd, timeout, check=False, capture_output=False, **kw):
    """`subprocess.run(cmd, timeout=…, check=…, capture_output=…, **kw)`, except that at the
    deadline (or on any interruption) the child is killed with everything it started
    (`kill_tree`) before `subprocess.TimeoutExpired` is raised."""
    if capture_output:
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
    with subprocess.Popen(cmd, **kw) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            kill_tree(p.pid)
            e.output, e.stderr = p.communicate()
            raise
        except BaseException:
            kill_tree(p.pid)
            p.wait()
            raise
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    if check:
        r.check_returncode()
    return r
