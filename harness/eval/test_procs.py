"""Unit tests of procs.py: a killed child takes the process groups it started with it.

Run: python3 -m unittest discover -s harness/eval -v
"""

import os
import subprocess
import sys
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procs  # noqa: E402

# A child that starts a grandchild in a process group of its own (as the harness starts cargo
# and the benches), prints the grandchild's pid, and waits.
PARENT = ("import subprocess, sys, time\n"
          "g = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
          "print(g.pid, flush=True)\n"
          "time.sleep(60)\n")


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class KillTree(unittest.TestCase):
    def test_the_child_and_its_own_group_grandchild_are_killed(self):
        child = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE,
                                 text=True)
        grandchild = int(child.stdout.readline())
        self.assertNotEqual(os.getpgid(grandchild), os.getpgrp())
        self.assertIn(grandchild, procs.descendants(child.pid))
        procs.kill_tree(child.pid)
        child.wait(timeout=10)
        for _ in range(100):
            if not alive(grandchild):
                break
            time.sleep(0.05)
        self.assertFalse(alive(grandchild), "the grandchild in its own group survived")


class Run(unittest.TestCase):
    def test_at_the_deadline_the_grandchild_dies_too(self):
        # The grandchild's output goes elsewhere (as a cargo build's compilers' may), so nothing
        # but the kill itself ends it.
        parent = PARENT.replace("['sleep', '60'],", "['sleep', '60'], stdout=subprocess.DEVNULL,")
        started = time.monotonic()
        with self.assertRaises(subprocess.TimeoutExpired) as caught:
            procs.run([sys.executable, "-c", parent], timeout=2, capture_output=True, text=True)
        self.assertLess(time.monotonic() - started, 30)
        grandchild = int(caught.exception.output.split()[0])
        for _ in range(100):
            if not alive(grandchild):
                break
            time.sleep(0.05)
        self.assertFalse(alive(grandchild), "the grandchild outlived the deadline")

    def test_otherwise_it_is_subprocess_run(self):
        r = procs.run([sys.executable, "-c", "print('out'); import sys; sys.exit(3)"],
                      timeout=30, capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stdout), (3, "out\n"))
        with self.assertRaises(subprocess.CalledProcessError):
            procs.run([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=30, check=True)


if __name__ == "__main__":
    unittest.main()
