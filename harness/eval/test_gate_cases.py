"""Unit tests of gate_cases.py's reach and row reading (standard library only)."""

import json
import statistics
import math
import re
import tempfile
import unittest
from pathlib import Path

import gate_cases
import ground_truth


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


class CaseModelsTest(unittest.TestCase):
    def test_a_cases_recorded_kind_names_it_and_a_note_does_not(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "quiet"
            for case, cpu in (("a", "AMD EPYC"), ("b", "AMD EPYC"), ("c", "Xeon")):
                run = out / case / "run-001"
                run.mkdir(parents=True)
                (run / "results.json").write_text(json.dumps({"host": {"cpu": cpu}}))
            (Path(d) / "hosts.json").write_text(json.dumps({
                "a": {"cpu": "AMD EPYC", "cpu_id": "family 25 model 17 stepping 1"},
                "b": {"cpu": "AMD EPYC", "cpu_id": "unrecorded (begun before 2026-12-05)"}}))
            got = gate_cases.case_models(out, gate_cases.load_hosts(out))
            self.assertEqual(got, "; on CPU models: AMD EPYC 1, AMD EPYC (family 25 model 17 "
                                  "stepping 1) 1, Xeon 1")
            self.assertEqual(gate_cases.case_models(out), "; on CPU models: AMD EPYC 2, Xeon 1")


class BucketTest(unittest.TestCase):
    def test_clopper_pearson_matches_published_values(self):
        # Exact 95 % intervals (Clopper & Pearson 1934; e.g. R's binom.test).
        for (k, n), (lo, hi) in {(5, 10): (0.1871, 0.8129), (9, 10): (0.5550, 0.9975),
                                 (0, 10): (0.0, 0.3085), (10, 10): (0.6915, 1.0),
                                 (27, 30): (0.7347, 0.9789)}.items():
            got = gate_cases.clopper_pearson(k, n)
            self.assertAlmostEqual(got[0], lo, places=4, msg=(k, n))
            self.assertAlmostEqual(got[1], hi, places=4, msg=(k, n))
        self.assertEqual(gate_cases.clopper_pearson(0, 0), (0.0, 1.0))

    def test_clopper_pearson_holds_for_a_thousand_rows_and_more(self):
        # The corpus's untouched rows pass 1,030, where an integer binomial coefficient no
        # longer fits a float. Each bound must solve its defining tail equation, here checked
        # in exact rational arithmetic; k = 0 has the closed form 1 - (a/2)^(1/n).
        from fractions import Fraction

        def cdf(k, n, p):  # P(X <= k), k + 1 exact terms
            p = Fraction(p)
            return float(sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i)
                             for i in range(k + 1)))

        for k, n in ((5, 1000), (7, 1100)):
            lo, hi = gate_cases.clopper_pearson(k, n)
            self.assertAlmostEqual(1 - cdf(k - 1, n, lo), 0.025, places=6, msg=(k, n))
            self.assertAlmostEqual(cdf(k, n, hi), 0.025, places=6, msg=(k, n))
        self.assertAlmostEqual(gate_cases.clopper_pearson(0, 2000)[1],
                               1 - 0.025 ** (1 / 2000), places=9)

    def test_buckets_by_the_ground_truth_point_estimate_and_delta(self):
        self.assertEqual(gate_cases.bucket_of(0.029, 0.03), "< δ")
        self.assertEqual(gate_cases.bucket_of(0.03, 0.03), "δ to 5 %")
        self.assertEqual(gate_cases.bucket_of(0.05, 0.03), "5 to 10 %")
        self.assertEqual(gate_cases.bucket_of(0.12, 0.03), "≥ 10 %")
        self.assertEqual(gate_cases.threads_of("matmul/f32_t2/1x256x256"), "two")
        self.assertEqual(gate_cases.threads_of("tiny/a/cpu-f32"), "single")

    def test_only_rows_with_a_ground_truth_inside_the_reach_are_counted(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "cases").mkdir()
            (d / "cases" / "reach.json").write_text(json.dumps(
                {"c": {"kind": "memory", "neutral": False, "reach": ["^add/"], "expected": []}}))
            (d / "truth" / "c").mkdir(parents=True)
            (d / "truth" / "c" / "ground-truth.json").write_text(json.dumps({"rows": {
                "add/f32/small": {"change": 0.08}, "gather/f32/small": {"change": 0.2}}}))
            run = d / "quiet" / "c" / "run-001"
            run.mkdir(parents=True)
            (run / "run.json").write_text(json.dumps({"wall_s": 600.0}))
            (run / "results.json").write_text(json.dumps({"host": {"cpu": "EPYC"}, "benches": [
                {"id": "add/f32/small", "status": "regression", "threshold": 0.03},
                {"id": "add/f16/small", "status": "no_change", "threshold": 0.03},
                {"id": "add/bf16/small", "status": "regression", "threshold": 0.03},
                {"id": "add/bf16/large", "status": "regression", "threshold": 0.03},
                {"id": "gather/f32/small", "status": "no_change", "threshold": 0.03}]}))
            rows, walls = gate_cases.bucket_rows(d / "quiet", d / "truth",
                                                 gate_cases.reach_patterns(d / "cases"))
            self.assertEqual(rows, [("single", "5 to 10 %", "regression")])
            self.assertEqual(walls, [{"wall_s": 600.0}])

    def test_two_thread_rows_count_only_with_the_paired_truth(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "cases").mkdir()
            (d / "cases" / "reach.json").write_text(json.dumps(
                {"c": {"kind": "parallel", "neutral": False, "reach": ["^matmul/"],
                       "expected": []}, "e": {"neutral": False, "reach": ["^matmul/"]}}))
            for case in ("c", "e"):
                (d / "truth" / case).mkdir(parents=True)
                (d / "truth" / case / "ground-truth.json").write_text(json.dumps({"rows": {
                    "matmul/f32_t1/1x256x256": {"change": 0.1},
                    "matmul/f32_t2/1x256x256": {"change": 0.3},
                    "matmul/f16_t2/1x256x256": {"change": 0.3}}}))
                (d / "t2" / case).mkdir(parents=True)
                run = d / "quiet" / case / "run-001"
                run.mkdir(parents=True)
                (run / "results.json").write_text(json.dumps({"benches": [
                    {"id": b, "status": "regression", "threshold": 0.03} for b in (
                        "matmul/f32_t1/1x256x256", "matmul/f32_t2/1x256x256",
                        "matmul/f16_t2/1x256x256")]}))
            # c: a paired truth (ground_truth.py --paired); e: the dedicated machine's, whose
            # method failed its A/A.
            (d / "t2" / "c" / "ground-truth.json").write_text(json.dumps({"paired": True,
                "rows": {"matmul/f32_t1/1x256x256": {"change": 0.9},  # not two-thread: ignored
                         "matmul/f32_t2/1x256x256": {"change": 0.02}}}))
            (d / "t2" / "e" / "ground-truth.json").write_text(json.dumps({"paired": False,
                "rows": {"matmul/f32_t2/1x256x256": {"change": 0.02}}}))
            runs = {c: t for c, _, t, _ in gate_cases.case_runs(d / "quiet", d / "truth",
                                                                d / "t2")}
            self.assertEqual(runs["c"]["matmul/f32_t1/1x256x256"], {"change": 0.1})
            self.assertEqual(runs["c"]["matmul/f32_t2/1x256x256"],
                             {"change": 0.02, "method": "paired"})
            self.assertEqual(runs["e"]["matmul/f32_t2/1x256x256"]["method"], "device")
            # Buckets: c's f16_t2 row (plain truth) and e's device truths are left out.
            rows, _ = gate_cases.bucket_rows(d / "quiet", d / "truth",
                                             gate_cases.reach_patterns(d / "cases"), d / "t2")
            self.assertEqual(sorted(rows), [("single", "≥ 10 %", "regression"),
                                            ("single", "≥ 10 %", "regression"),
                                            ("two", "< δ", "regression")])

    def test_two_sittings_of_a_two_thread_truth_are_pooled(self):
        # Records as ground_truth.py writes them: rounds as log ratios, change and interval as
        # fractions (expm1). One sitting near +0 %, the other near +60 % (log 0.47: large enough
        # that a log ratio read as a fraction is off by far more than the checks' tolerance).
        # Their intervals apart, the pooled interval is their hull, which settles neither ±δ
        # nor δ + 1 % (the counting leaves the row out); one sitting alone is taken as it is.
        def record(lrs):
            return json.dumps({"paired": True, "rows": {
                "matmul/f16_t2/1x256x256": ground_truth.truth_row(lrs)}})

        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "truth" / "c").mkdir(parents=True)
            (d / "truth" / "c" / "ground-truth.json").write_text(json.dumps({"rows": {}}))
            run = d / "quiet" / "c" / "run-001"
            run.mkdir(parents=True)
            (run / "results.json").write_text(json.dumps({"benches": []}))
            early = [0.001 * i - 0.005 for i in range(12)]
            late = [0.47 + 0.001 * i for i in range(12)]
            for name, lrs in (("t2", early), ("t2-late", late)):
                (d / name / "c").mkdir(parents=True)
                (d / name / "c" / "ground-truth.json").write_text(record(lrs))
            [(_, _, one, _)] = list(gate_cases.case_runs(d / "quiet", d / "truth", d / "t2"))
            self.assertAlmostEqual(one["matmul/f16_t2/1x256x256"]["change"],
                                   math.expm1(statistics.median(early)))
            [(_, _, both, _)] = list(gate_cases.case_runs(
                d / "quiet", d / "truth", f"{d / 't2'},{d / 't2-late'}"))
            row = both["matmul/f16_t2/1x256x256"]
            self.assertEqual(row["rounds"], 24)
            self.assertEqual(row["method"], "paired")
            self.assertEqual(len(row["sittings"]), 2)
            self.assertTrue(row["disagree"])
            lo_early = json.loads(record(early))["rows"]["matmul/f16_t2/1x256x256"]["ci95"][0]
            hi_late = json.loads(record(late))["rows"]["matmul/f16_t2/1x256x256"]["ci95"][1]
            self.assertEqual(row["ci95"], [lo_early, hi_late])
            self.assertTrue(lo_early < row["change"] < hi_late)
            # Sittings that agree, both near +60 %: the rounds pooled, the interval their
            # signed-rank one, in fractions: between the sittings' own changes, not their logs.
            (d / "t2" / "c" / "ground-truth.json").write_text(record(late))
            (d / "t2-late" / "c" / "ground-truth.json").write_text(
                record([x + 0.002 for x in late]))
            [(_, _, both, _)] = list(gate_cases.case_runs(
                d / "quiet", d / "truth", f"{d / 't2'},{d / 't2-late'}"))
            row = both["matmul/f16_t2/1x256x256"]
            self.assertFalse(row["disagree"])
            lo, hi = row["ci95"]
            first, second = (s["change"] for s in row["sittings"])
            self.assertTrue(math.expm1(min(late)) < lo < row["change"] < hi
                            < math.expm1(max(late) + 0.002))
            self.assertTrue(first < row["change"] < second)

    def test_sampling_rows_count_only_with_the_paired_truth(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "cases").mkdir()
            (d / "cases" / "reach.json").write_text(json.dumps(
                {"c": {"kind": "constant", "neutral": False,
                       "reach": ["^sampling_latency/", "^logit_processing/", "^add/"],
                       "expected": []}}))
            (d / "truth" / "c").mkdir(parents=True)
            (d / "truth" / "c" / "ground-truth.json").write_text(json.dumps({"rows": {
                "sampling_latency/top_k_per_token/49152": {"change": 0.3},
                "logit_processing/seven_processor_chain_per_step/49152": {"change": 0.3},
                "add/f32/small": {"change": 0.3}}}))
            (d / "paired" / "c").mkdir(parents=True)
            paired = d / "paired" / "c" / "ground-truth.json"
            paired.write_text(json.dumps({"paired": True, "rows": {
                "add/f32/small": {"change": 0.9},  # not a sampling row: ignored
                "sampling_latency/top_k_per_token/49152": {"change": 0.06}}}))
            run = d / "quiet" / "c" / "run-001"
            run.mkdir(parents=True)
            (run / "results.json").write_text(json.dumps({"benches": [
                {"id": b, "status": "regression", "threshold": 0.03} for b in (
                    "sampling_latency/top_k_per_token/49152",
                    "logit_processing/seven_processor_chain_per_step/49152",
                    "add/f32/small")]}))
            reach = gate_cases.reach_patterns(d / "cases")
            # Without the paired truth, only the plain row counts.
            rows, _ = gate_cases.bucket_rows(d / "quiet", d / "truth", reach)
            self.assertEqual(rows, [("single", "≥ 10 %", "regression")])
            # With it, the top_k row counts at its paired estimate; the chain, without one, not.
            rows, _ = gate_cases.bucket_rows(d / "quiet", d / "truth", reach, None, d / "paired")
            self.assertEqual(sorted(rows), [("single", "5 to 10 %", "regression"),
                                            ("single", "≥ 10 %", "regression")])
            [(_, _, truth, _)] = list(gate_cases.case_runs(d / "quiet", d / "truth", None,
                                                           d / "paired"))
            self.assertEqual(truth["add/f32/small"], {"change": 0.3})
            self.assertEqual(truth["sampling_latency/top_k_per_token/49152"]["method"], "paired")

    def test_case_models_named_when_more_than_one(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            for case, cpu in (("a", "AMD EPYC"), ("b", "Intel Xeon"), ("c", "AMD EPYC")):
                run = d / case / "run-001"
                run.mkdir(parents=True)
                (run / "results.json").write_text(json.dumps({"benches": [],
                                                              "host": {"cpu": cpu}}))
            self.assertEqual(gate_cases.case_models(d),
                             "; on CPU models: AMD EPYC 2, Intel Xeon 1")
            (d / "b" / "run-001" / "results.json").write_text(json.dumps({
                "benches": [], "host": {"cpu": "AMD EPYC"}}))
            self.assertEqual(gate_cases.case_models(d), "")
            # a failed run (no results) names no model; a run without a host is "unknown"
            (d / "e" / "run-001").mkdir(parents=True)
            self.assertEqual(gate_cases.case_models(d), "")
            (d / "f" / "run-001").mkdir(parents=True)
            (d / "f" / "run-001" / "results.json").write_text(json.dumps({"benches": []}))
            self.assertEqual(gate_cases.case_models(d), "; on CPU models: AMD EPYC 3, unknown 1")

    def test_headline_counts_against_the_targets(self):
        import argparse
        import contextlib
        import io
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            (d / "cases").mkdir()
            (d / "cases" / "reach.json").write_text(json.dumps({
                "c": {"neutral": False, "reach": ["^add/", "^sampling_latency/"]},
                "n": {"neutral": True, "reach": ["^gather/"]}}))
            (d / "truth" / "c").mkdir(parents=True)
            (d / "truth" / "c" / "ground-truth.json").write_text(json.dumps({"rows": {
                "add/f32/small": {"change": 0.08, "ci95": [0.06, 0.10]},
                "add/f16/small": {"change": 0.10, "ci95": [0.07, 0.12]},
                # truly faster: a 🔴 there is false too
                "add/bf16/small": {"change": -0.10, "ci95": [-0.12, -0.07]},
                # uncertain past ±δ either way: unchecked
                "add/bf16/large": {"change": 0.0, "ci95": [-0.05, 0.05]},
                # a plain truth of a sampling row, "slow" by its interval: cannot place the row
                "sampling_latency/top_k_per_token/49152": {"change": 0.2, "ci95": [0.1, 0.3]},
                # outside c's reach: untouched by construction, whatever this truth says
                "gather/f32/small": {"change": 0.2, "ci95": [0.1, 0.3]}}}))
            run = d / "quiet" / "c" / "run-001"
            run.mkdir(parents=True)
            (run / "run.json").write_text(json.dumps({"wall_s": 600.0}))
            (run / "results.json").write_text(json.dumps({"host": {"cpu": "EPYC"}, "benches": [
                {"id": "add/f32/small", "status": "regression", "threshold": 0.03},
                {"id": "add/f16/small", "status": "no_change", "threshold": 0.03},
                {"id": "add/bf16/small", "status": "regression", "threshold": 0.03},
                {"id": "add/bf16/large", "status": "regression", "threshold": 0.03},
                {"id": "sampling_latency/top_k_per_token/49152", "status": "no_change",
                 "threshold": 0.03},
                {"id": "gather/f32/small", "status": "regression", "threshold": 0.03}]}))
            for i, red, cpu in ((1, 0, "EPYC"), (2, 2, "Xeon"), (3, 0, "Xeon")):
                t = d / "aa" / "aa" / "full-none" / f"run-{i:03d}"
                t.mkdir(parents=True)
                (t / "trial.json").write_text(json.dumps({"wall_s": 900.0,
                                                          "host": {"cpu": cpu}}))
                (t / "results.json").write_text(json.dumps({"benches": [
                    {"id": f"add/{k}", "status": "regression" if k < red else "no_change"}
                    for k in range(3)]}))
            a = argparse.Namespace(out=[str(d / "quiet")], load=["none"], aa=str(d / "aa"),
                                   cases_dir=str(d / "cases"), ground=str(d / "truth"),
                                   ground_t2=None, ground_sampling=None, readme=None,
                                   quick=None)
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                gate_cases.headline(a)
            got = {line.split(" | ")[0].strip("| "): line.split(" | ")[1]
                   for line in buf.getvalue().splitlines()[2:]}
            self.assertEqual(got["corpus PRs measured"], "1 regressions, 0 neutral")
            # one CPU model among the A/A runs: no per-model part (asserted below with two)
            a1 = gate_cases.aa_cell([(0, 3, 900.0, "EPYC"), (1, 3, 900.0, "EPYC")])
            self.assertNotIn("per CPU model", a1)
            self.assertTrue(a1.startswith("1 of 2 "), a1)
            a2 = gate_cases.aa_cell([(0, 3, 1.0, "unknown"), (2, 3, 1.0, "Xeon")])
            self.assertIn("per CPU model: Xeon: 1 of 1 ", a2)
            self.assertIn("; unknown: 0 of 1 ", a2)
            # gather/f32/small is outside c's reach and add/bf16/small truly faster: two false
            # 🔴 of the 2 rows checked (add/bf16/large's truth cannot tell: unchecked)
            self.assertTrue(got[next(k for k in got if k.startswith("🔴 on a row"))]
                            .startswith("2 of 2 "))
            aa = got["A/A runs of the full suite with any 🔴"]
            self.assertTrue(aa.startswith("1 of 3 "), aa)
            self.assertIn("2 🔴 of 9 rows", aa)
            # two CPU models: each counted apart as well
            self.assertIn("per CPU model: EPYC: 0 of 1 ", aa)
            self.assertIn("; Xeon: 1 of 2 ", aa)
            self.assertIn("Xeon: 1 of 2 [1.3, 98.7 %] runs, 2 🔴 of 6 rows", aa)
            missed = got[next(k for k in got if k.startswith("✅ on"))]
            # add/f16 ✅ at a truth ≥ δ+1 %: 1 of the 2 trusted rows; the sampling row apart.
            self.assertTrue(missed.startswith("1 of 2 "), missed)
            self.assertIn(": single-threaded 1 of 2, two-thread 0 of 0", missed)
            self.assertIn("and 1 on a truth of a method that cannot place the row", missed)
            self.assertIn("median 10.0 min, max 10.0 min (1 run)",
                          got[next(k for k in got if k.startswith("wall"))])
            self.assertIn("wall time median 15.0 min",
                          got["A/A runs of the full suite with any 🔴"])
            self.assertEqual(got[next(k for k in got if k.startswith("multi-threaded rows"))],
                             "none yet", "no row carries a reading")
            # a neutral case run on another CPU model: the cases cell names both models
            n_run = d / "quiet" / "n" / "run-001"
            n_run.mkdir(parents=True)
            (n_run / "run.json").write_text(json.dumps({"wall_s": 600.0}))
            (n_run / "results.json").write_text(json.dumps({"host": {"cpu": "Xeon"}, "benches": [
                {"id": "gather/f32/small", "status": "no_change", "threshold": 0.03}]}))
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                gate_cases.headline(a)
            got = {line.split(" | ")[0].strip("| "): line.split(" | ")[1]
                   for line in buf.getvalue().splitlines()[2:]}
            self.assertEqual(got["corpus PRs measured"],
                             "1 regressions, 1 neutral; on CPU models: EPYC 1, Xeon 1")
            # --readme: the table goes between the markers, the rest of the file kept.
            readme = d / "README.md"
            start, end = gate_cases.HEADLINE_START, gate_cases.HEADLINE_END
            readme.write_text(f"a\n{start}\nold\n{end}\nb\n")
            a.readme = str(readme)
            with contextlib.redirect_stdout(io.StringIO()):
                gate_cases.headline(a)
            text = readme.read_text()
            self.assertTrue(text.startswith(f"a\n{start}\nGenerated "))
            self.assertTrue(text.endswith(f"|\n{end}\nb\n"))
            self.assertNotIn("old", text)


class CrowdingTest(unittest.TestCase):
    def test_rows_with_readings_are_counted_and_crowded_ones_told_by_their_note(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            side = lambda *o: {"samples": [{"round": i, "others_cores": x}
                                           for i, x in enumerate(o)]}
            for i, (note, others) in enumerate((("", (0.01, 0.03)),
                                                (gate_cases.CROWDED_NOTE + " 0.98", (0.97, 0.99)))):
                t = d / "aa" / "full-none" / f"run-{i + 1:03d}"
                t.mkdir(parents=True)
                (t / "results.json").write_text(json.dumps({"benches": [
                    {"id": "matmul/f32_t2/1x256x256",
                     "status": "too_noisy" if note else "no_change", "note": note,
                     "base": side(*others), "head": side(*others)},
                    # a ❔ for another reason is not crowded
                    {"id": "matmul/f16_t2/1x256x256", "status": "too_noisy",
                     "note": "inconclusive", "base": side(0.1), "head": side(0.1)},
                    # no reading: not counted
                    {"id": "add/f32/small", "status": "no_change",
                     "base": {"samples": [{"round": 0}]}}]}))
            rows = gate_cases.aa_crowding(d, "none")
            self.assertEqual(len(rows), 4)
            self.assertEqual(sorted(c for c, _ in rows), [False, False, False, True])
            self.assertAlmostEqual(max(m for _, m in rows), 0.98)
            cell = gate_cases.crowding_cell(rows)
            self.assertTrue(cell.startswith("1 of 4 "), cell)
            self.assertIn("median 0.10, range 0.02 to 0.98", cell)
            self.assertEqual(gate_cases.crowding_cell([]), "none yet")


class BuildStagesTest(unittest.TestCase):
    LINES = [(0.1, "checking out base 08486ba (…)\n"),
             (0.2, "building base in /c/worktrees/base\n"),
             (612.0, "building head in /c/worktrees/head\n"),
             (700.0, "probing the time the host takes (2 s)\n"),
             (702.5, "[0/944] round 1 paired decode/tiny_tokens_per_second/32_tokens\n"),
             (760.0, "[112/944] round 1 paired logit_processing/…, about 7.5 min left\n")]

    def test_stages_are_read_from_the_progress_lines(self):
        got = gate_cases.stage_times(self.LINES)
        self.assertEqual(got, {"base_build": 611.8, "head_build": 90.5,
                               "until_first_round": 702.5})
        self.assertTrue(gate_cases.is_cold(got))

    def test_a_warm_base_build_is_not_cold_and_missing_lines_say_unknown(self):
        warm = [(0.2, "building base in b\n"), (3.0, "building head in h\n"),
                (95.0, "[0/10] round 1 base x\n")]
        self.assertFalse(gate_cases.is_cold(gate_cases.stage_times(warm)))
        none = gate_cases.stage_times([(1.0, "error: no such revision\n")])
        self.assertEqual(none, {"base_build": None, "head_build": None,
                                "until_first_round": None})
        self.assertIsNone(gate_cases.is_cold(none))
        self.assertIsNone(gate_cases.is_cold(None))

    def test_run_timed_keeps_stderr_lines_with_their_times_and_kills_at_the_deadline(self):
        import sys
        code, lines = gate_cases.run_timed(
            [sys.executable, "-c",
             "import sys, time; print('a', file=sys.stderr, flush=True); time.sleep(0.5); "
             "print('b', file=sys.stderr); sys.exit(1)"], ".", 30)
        self.assertEqual(code, 1)
        self.assertEqual([x for _, x in lines], ["a\n", "b\n"])
        self.assertGreaterEqual(lines[1][0] - lines[0][0], 0.4)
        import time
        t0 = time.time()
        code, lines = gate_cases.run_timed(
            [sys.executable, "-c", "import time; time.sleep(30)"], ".", 1)
        self.assertLess(time.time() - t0, 10, "killed at the deadline, not waited for")
        self.assertIsNone(code)
        self.assertIn("deadline", lines[-1][1])
        # a byte that is not UTF-8 neither stops the reader nor loses the lines after it
        code, lines = gate_cases.run_timed(
            [sys.executable, "-c",
             "import sys; sys.stderr.buffer.write(b'x\\xff\\n' + b'y\\n' * 50000)"], ".", 30)
        self.assertEqual(code, 0)
        self.assertEqual(len(lines), 50001)

    def test_the_wall_cell_keeps_cold_runs_apart(self):
        metas = [{"wall_s": 600.0}, {"wall_s": 720.0, "cold": False},
                 {"wall_s": 1800.0, "cold": True, "stages_s": {"base_build": 900.0}}]
        cell = gate_cases.wall_cell(metas)
        self.assertTrue(cell.startswith("median 11.0 min, max 12.0 min (2 runs)"), cell)
        self.assertIn("cold first runs: 30.0 min (15.0 of it the base's build)", cell)
        self.assertEqual(gate_cases.wall_cell(metas[:1]), "median 10.0 min, max 10.0 min (1 run)")
        # a cold run marked by hand, from a session's log, has no stages
        hand = gate_cases.wall_cell([{"wall_s": 600.0}, {"wall_s": 1500.0, "cold": True}])
        self.assertTrue(hand.endswith("; apart, cold first runs: 25.0 min"), hand)
        only_cold = gate_cases.wall_cell([{"wall_s": 1500.0, "cold": True}])
        self.assertEqual(only_cold, "no warm run yet; apart, cold first runs: 25.0 min")

    def test_the_wall_cell_leaves_out_runs_that_could_not_run(self):
        metas = [{"wall_s": 600.0, "exit": 0}, {"wall_s": 720.0, "exit": 1},
                 {"wall_s": 5.0, "exit": 2}]
        cell = gate_cases.wall_cell(metas)
        self.assertTrue(cell.startswith("median 11.0 min, max 12.0 min (2 runs)"), cell)
        self.assertTrue(cell.endswith("; left out: 1 run that could not run (exit 2)"), cell)
        # runs from before `exit` was recorded count as they did
        self.assertEqual(gate_cases.wall_cell([{"wall_s": 600.0}]),
                         "median 10.0 min, max 10.0 min (1 run)")


class PrepareTest(unittest.TestCase):
    def test_a_relative_cases_dir_is_applied_from_inside_the_work_clone(self):
        # measure-all.sh passes `--cases-dir harness/eval/corpus-fresh`, relative to the
        # checkout; `git apply` runs in the work clone, so the path must be made absolute.
        import os
        rev = gate_cases.git("rev-parse", "HEAD", cwd=gate_cases.REPO)
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "cases").mkdir()
            (Path(d) / "cases" / "probe.patch").write_text(
                "diff --git a/eval-prepare-probe.txt b/eval-prepare-probe.txt\n"
                "new file mode 100644\n--- /dev/null\n+++ b/eval-prepare-probe.txt\n"
                "@@ -0,0 +1 @@\n+probe\n")
            before = os.getcwd()
            os.chdir(d)
            try:
                gate_cases.prepare(Path(d) / "work", rev, ["probe"], Path("cases"))
            finally:
                os.chdir(before)
            shown = gate_cases.git("show", "case/probe:eval-prepare-probe.txt",
                                   cwd=Path(d) / "work")
            self.assertEqual(shown, "probe")
            self.assertEqual(gate_cases.git("rev-parse", "case/probe^", cwd=Path(d) / "work"),
                             rev)


if __name__ == "__main__":
    unittest.main()
