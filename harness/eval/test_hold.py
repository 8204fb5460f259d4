"""hold.py: a step waits exactly while the hold file exists."""

import os
import tempfile
import unittest
from unittest import mock
from pathlib import Path

import hold


class Hold(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.file = Path(self.dir.name) / "eval.hold"
        env = mock.patch.dict(os.environ, {"DECODER_GATE_EVAL_HOLD": str(self.file)})
        env.start()
        self.addCleanup(env.stop)

    def test_no_file_no_wait(self):
        lines, sleeps = [], []
        self.assertEqual(hold.wait_while_held(lines.append, "x", sleep=sleeps.append), 0.0)
        self.assertEqual((lines, sleeps), ([], []))

    def test_waits_until_the_file_is_gone(self):
        self.file.touch()
        lines, sleeps = [], []

        def sleep(s):
            sleeps.append(s)
            if len(sleeps) == 3:
                self.file.unlink()

        hold.wait_while_held(lines.append, "case quiet", poll_s=1.0, sleep=sleep)
        self.assertEqual(sleeps, [1.0, 1.0, 1.0])
        self.assertEqual(len(lines), 2)
        self.assertIn("case quiet waits while", lines[0])
        self.assertIn("goes on after", lines[1])


if __name__ == "__main__":
    unittest.main()
