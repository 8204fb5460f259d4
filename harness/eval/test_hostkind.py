"""Unit tests of hostkind.py (the CPU kind the eval scripts record), of how the tables name a
kind (gate_cases.cpu_of), and of the deadline on evaluate.py's `harness compare` children.

Run: python3 -m unittest discover -s harness/eval -v
"""

import argparse
import os
import sys
import tempfile
import unittest
from unittest import mock
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evaluate as ev  # noqa: E402
import gate_cases  # noqa: E402
import hostkind  # noqa: E402

# Two processors of an EPYC VM, as /proc/cpuinfo lists them (abridged).
CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: Other
stepping\t: 0
"""


class HostKind(unittest.TestCase):
    def write(self, d, text):
        p = Path(d) / "cpuinfo"
        p.write_text(text)
        return p

    def test_the_first_processors_model_and_id_are_read(self):
        with tempfile.TemporaryDirectory() as d:
            p = self.write(d, CPUINFO)
            self.assertEqual(hostkind.cpu_model(p), "AMD EPYC")
            self.assertEqual(hostkind.cpu_id(p), "family 25 model 17 stepping 1")

    def test_a_missing_field_or_file_is_unknown_never_a_guess(self):
        with tempfile.TemporaryDirectory() as d:
            p = self.write(d, CPUINFO.split("stepping")[0])  # processor 0 without a stepping
            self.assertIsNone(hostkind.cpu_id(p))
            self.assertIsNone(hostkind.cpu_id(Path(d) / "absent"))
            self.assertEqual(hostkind.cpu_model(Path(d) / "absent"), "unknown")

    def test_a_trial_records_the_id_and_the_tables_name_it(self):
        host = ev.host_info()
        self.assertIn("cpu_id", host)
        self.assertEqual(gate_cases.cpu_of({"host": {"cpu": "AMD EPYC",
                                                     "cpu_id": "family 25 model 17 stepping 1"}}),
                         "AMD EPYC (family 25 model 17 stepping 1)")
        self.assertEqual(gate_cases.cpu_of({"host": {"cpu": "AMD EPYC"}}), "AMD EPYC")
        self.assertEqual(gate_cases.cpu_of({}), "unknown")


class CompareDeadline(unittest.TestCase):
    def test_a_compare_past_its_deadline_is_killed_and_leaves_no_trial(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            fake = d / "harness"
            fake.write_text("#!/bin/sh\nsleep 30\n")
            fake.chmod(0o755)
            args = argparse.Namespace(harness=str(fake), rounds=None, cache_dir=None,
                                      harness_arg=None, out_dir=d)
            old = ev.COMPARE_TIMEOUT_S
            ev.COMPARE_TIMEOUT_S = 1
            # A hold asked for on this machine (hold.py) must not stop the test.
            try:
                with self.assertRaises(SystemExit) as e, mock.patch.dict(
                        os.environ, {"DECODER_GATE_EVAL_HOLD": str(d / "no.hold")}):
                    ev.run_trial(args, d / "run-001", "aa", {}, "a", "a", "full", None)
            finally:
                ev.COMPARE_TIMEOUT_S = old
            self.assertIn("deadline", str(e.exception))
            self.assertFalse((d / "run-001" / "trial.json").exists())
            self.assertFalse((d / "run-001.tmp" / "trial.json").exists())


if __name__ == "__main__":
    unittest.main()
