"""quick_time.py's pure parts on synthetic runs."""

import json
import tempfile
import unittest
from pathlib import Path

import quick_time


def results(rounds, benches=(), correctness=()):
    return {"rounds": [{"started_unix_s": s, "duration_s": d} for s, d in rounds],
            "benches": [{"id": i, "status": st} for i, st in benches],
            "e2e": {"correctness": [{"id": i, "status": st} for i, st in correctness]}}


class QuickTime(unittest.TestCase):
    def test_stages_split_the_wall_time(self):
        meta = {"wall_s": 170.0, "stages_s": {"until_first_round": 50.0}}
        # Rounds from t=1000 to t=1100 (the last one starts at 1090 and lasts 10 s).
        res = results([(1000.0, 20.0), (1090.0, 10.0), (1020.0, 20.0)])
        self.assertEqual(quick_time.run_times(meta, res), (170.0, 50.0, 100.0, 20.0))

    def test_missing_stages_are_none_not_zero(self):
        self.assertEqual(quick_time.run_times({"wall_s": 90.0}, None), (90.0, None, None, None))

    def test_only_rows_that_are_not_ok_are_listed(self):
        res = results([], [("a", "no_change"), ("b", "regression"), ("c", "too_noisy")],
                      [("t/cpu", "identical"), ("t/cuda", "not_run"), ("u/cpu", "diverged")])
        self.assertEqual(quick_time.flagged(res),
                         ["🔴 `b`", "❔ `c`", "diverged `u/cpu`"])

    def test_table_counts_runs_within_the_target_with_an_interval(self):
        with tempfile.TemporaryDirectory() as d:
            for case, wall in (("x", 170.0), ("y", 200.0)):
                run = Path(d) / case / "run-001"
                run.mkdir(parents=True)
                (run / "run.json").write_text(json.dumps(
                    {"wall_s": wall, "stages_s": {"until_first_round": 40.0}}))
                (run / "results.json").write_text(json.dumps(
                    results([(0.0, 100.0)], [("a", "no_change")])))
            text = quick_time.table(d, 180.0)
        self.assertIn("| x | 170 | 40 | 100 (1) | 30 | every row ✅ |", text)
        self.assertIn("2 runs: median 185 s, max 200 s; 1 of 2 within 180 s [1.3, 98.7 %]", text)


if __name__ == "__main__":
    unittest.main()
