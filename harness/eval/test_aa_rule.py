"""Unit tests of corpus/aa_rule.py, the A/A rule a ground-truth method must pass."""

import importlib.util
import unittest
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "aa_rule", Path(__file__).resolve().parent / "corpus" / "aa_rule.py"
)
aa_rule = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(aa_rule)


def truth(*cis):
    return {"rows": {f"r{i}": {"change": 0.0, "ci95": list(ci)} for i, ci in enumerate(cis)}}


class AaRuleTest(unittest.TestCase):
    def test_intervals_holding_zero_within_the_edge_pass(self):
        ok, lines = aa_rule.judge(truth((-0.02, 0.03), (-0.099, 0.1)), 0.10, 2)
        self.assertTrue(ok)
        self.assertTrue(lines[-1].endswith("ACCEPTED"))

    def test_an_interval_off_zero_fails(self):
        ok, _ = aa_rule.judge(truth((-0.02, 0.03), (0.001, 0.04)), 0.10, 2)
        self.assertFalse(ok)

    def test_an_interval_past_the_edge_fails(self):
        self.assertFalse(aa_rule.judge(truth((-0.02, 0.11)), 0.10, 1)[0])
        self.assertFalse(aa_rule.judge(truth((-0.12, 0.01)), 0.10, 1)[0])

    def test_an_unknown_interval_or_a_missing_row_fails(self):
        self.assertFalse(aa_rule.judge(truth((None, 0.01)), 0.10, 1)[0])
        self.assertFalse(aa_rule.judge(truth((-0.01, 0.01)), 0.10, 2)[0])


if __name__ == "__main__":
    unittest.main()
