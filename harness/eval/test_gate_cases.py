"""Unit tests of gate_cases.py's reach and row reading (standard library only)."""

import json
import re
import tempfile
import unittest
from pathlib import Path

import gate_cases


class ReachTest(unittest.TestCase):
    def test_the_corpus_reach_json_gives_one_pattern_per_case(self):
        corpus = Path(__file__).resolve().parent / "corpus"
        reach = gate_cases.reach_patterns(corpus)
        cases = json.loads((corpus / "reach.json").read_text())
        self.assertEqual(set(reach), set(cases))
        # Every corpus case has a patch beside it.
        for name in cases:
            self.assertTrue((corpus / f"{name}.patch").is_file(), name)
        mv = reach["matvec-one-row-per-pass"]
        self.assertTrue(re.search(mv, "matvec/f16/576x1536"))
        self.assertFalse(re.search(mv, "matvec/f16_packed/576x1536"))
        self.assertTrue(re.search(mv, "tiny/capital_plain/cpu-f32"))
        self.assertFalse(re.search(mv, "tiny/capital_plain/cpu-f32/prefill"))
        self.assertFalse(re.search(mv, "add/f32/small"))

    def test_a_case_with_an_empty_reach_reaches_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "reach.json").write_text(json.dumps(
                {"n": {"kind": "neutral", "neutral": True, "reach": [], "expected": []}}))
            self.assertFalse(re.search(gate_cases.reach_patterns(d)["n"], "add/f32/small"))

    def test_without_reach_json_the_cases_own_table(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(gate_cases.reach_patterns(d), gate_cases.REACH)


class RowsTest(unittest.TestCase):
    def test_benchmarks_and_e2e_speed_rows_are_both_read(self):
        res = {"benches": [{"id": "add/f32/small", "status": "no_change", "threshold": 0.03,
                            "change": {"estimate": 0.01}}],
               "e2e": {"speed": [{"id": "tiny/a/cpu-f32", "status": "regression",
                                  "threshold": 0.03, "change": {"estimate": 0.08}},
                                 {"id": "tiny/a/cpu-f32/prefill", "status": "not_run",
                                  "threshold": None, "change": None}]}}
        rows = gate_cases.result_rows(res)
        self.assertEqual([r[0] for r in rows],
                         ["add/f32/small", "tiny/a/cpu-f32", "tiny/a/cpu-f32/prefill"])
        self.assertEqual(rows[1][1], "regression")
        self.assertEqual(rows[2][3], {})
        self.assertEqual(gate_cases.result_rows({"benches": []}), [])


if __name__ == "__main__":
    unittest.main()
