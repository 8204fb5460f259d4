"""Unit tests of evaluate.py's pure parts on synthetic results.json files.

Run: python3 -m unittest discover -s harness/eval -v
"""

import json
import math
import statistics
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evaluate as ev  # noqa: E402


def side(per_iter_ns, rounds=2, iters=(1, 2, 3, 4)):
    """A side whose every sample of every round takes `per_iter_ns` per iteration, except round 0,
    which may be a list (one per-iteration time per sample)."""
    samples = []
    for r in range(rounds):
        per = per_iter_ns if isinstance(per_iter_ns, list) and r == 0 else None
        if per is None:
            base = per_iter_ns[0] if isinstance(per_iter_ns, list) else per_iter_ns
            per = [base] * len(iters)
        samples.append({
            "round": r,
            "sampling_mode": "linear",
            "iters": list(iters[: len(per)]),
            "times_ns": [p * i for p, i in zip(per, iters)],
        })
    med = per_iter_ns[0] if isinstance(per_iter_ns, list) else per_iter_ns
    return {"per_round_ns": [med] * rounds, "median_ns": med, "samples": samples}


def bench(bid, status, base_ns, head_ns, estimate=None, p=0.5):
    return {
        "id": bid,
        "status": status,
        "base": side(base_ns),
        "head": side(head_ns),
        "change": None if estimate is None else {
            "estimate": estimate, "ci_low": estimate - 0.01, "ci_high": estimate + 0.01,
            "confidence": 0.95, "p_value": p, "p_adjusted": min(1.0, p * 8),
        },
        "threshold": 0.03,
        "threshold_source": "spread",
        "throughput": None,
        "rounds": 2,
        "confirmed": False,
        "note": None,
    }


BY_BENCH = "ABBA (AB on even rounds, BA on odd), one benchmark at a time"
BY_TARGET = "ABBA (AB on even rounds, BA on odd; per bench target)"


def results(benches, alpha=0.05, order=BY_BENCH, policy=None, rounds=None):
    method = {"alpha": alpha, "order": order}
    if policy:
        method["policy"] = policy
    if rounds is not None:
        method["rounds"] = rounds
    return {"schema": "harness-results/1", "benches": benches, "method": method, "rounds": [],
            "wall_s": 1.0}


class CriterionMean(unittest.TestCase):
    def test_mean_of_per_sample_time_per_iteration(self):
        # times/iters = 10, 20, 30 → 20 (not sum(times)/sum(iters) = 140/6 ≈ 23.3)
        s = {"iters": [1, 2, 3], "times_ns": [10, 40, 90]}
        self.assertAlmostEqual(ev.criterion_mean(s), 20.0)

    def test_outliers_are_kept_like_criterion(self):
        s = {"iters": [1, 1, 1, 1], "times_ns": [10, 10, 10, 1000]}
        self.assertAlmostEqual(ev.criterion_mean(s), 257.5)

    def test_invalid_samples_give_none(self):
        self.assertIsNone(ev.criterion_mean({"iters": [], "times_ns": []}))
        self.assertIsNone(ev.criterion_mean({"iters": [1, 0], "times_ns": [5, 5]}))
        self.assertIsNone(ev.criterion_mean({"iters": [1, 2], "times_ns": [5]}))
        self.assertIsNone(ev.criterion_mean({"iters": [1], "times_ns": [float("nan")]}))


def head_round(b, rnd, per_iter_ns):
    """Sets head's samples of round `rnd` to these per-iteration times."""
    s = next(x for x in b["head"]["samples"] if x["round"] == rnd)
    s["iters"] = s["iters"][: len(per_iter_ns)]
    s["times_ns"] = [p * i for p, i in zip(per_iter_ns, s["iters"])]


class NaiveVerdict(unittest.TestCase):
    def test_thresholds_base_round_zero_against_head_round_one(self):
        # Base round 0 against head round 1 (one pass apart, like the bot); head's round 0
        # (here equal to base) is not used.
        cases = [(100, 114, "no_change"), (100, 115, ev.WARN), (100, 129.9, ev.WARN),
                 (100, 130, ev.RED), (100, 60, "no_change")]
        for base, head, want in cases:
            b = bench("x", "no_change", base, base)
            head_round(b, 1, [head] * 10)
            status, change = ev.naive_verdict(b)
            self.assertEqual(status, want, (base, head))
            self.assertAlmostEqual(change, head / base - 1)

    def test_head_round_zero_when_there_is_no_round_one(self):
        b = bench("x", "no_change", 100, 130)
        b["head"]["samples"] = [s for s in b["head"]["samples"] if s["round"] == 0]
        self.assertEqual(ev.naive_verdict(b)[0], ev.RED)

    def test_uses_the_mean_not_the_min(self):
        b = bench("x", "no_change", 100, 100)
        head_round(b, 1, [100, 100, 100, 160])  # mean 115 → ⚠️ exactly
        status, change = ev.naive_verdict(b)
        self.assertEqual(status, ev.WARN)
        self.assertAlmostEqual(change, 0.15)

    def test_missing_side_is_not_computable(self):
        b = bench("x", "added", 100, 100)
        b["base"] = None
        self.assertEqual(ev.naive_verdict(b), (None, None))


class Counting(unittest.TestCase):
    def setUp(self):
        # Literal serde names of harness::results::Status (snake_case), not ev.RED/ev.WARN, so a
        # renamed constant fails here.
        self.r = results([
            bench("a", "regression", 100, 140, 0.4),
            bench("b", "possible_regression", 100, 120, 0.2),
            bench("c", "possible_regression", 100, 100, 0.0),
            bench("d", "too_noisy", 100, 116, 0.16),
            bench("e", "no_change", 100, 100, 0.0),
        ])

    def test_gate_counts_use_the_serde_names(self):
        self.assertEqual(ev.gate_counts(self.r), (1, 2))
        self.assertEqual(ev.gate_counts(self.r, {"a", "e"}), (1, 0))

    def test_naive_counts(self):
        # a: +40 % 🔴, b: +20 % ⚠️, d: +16 % ⚠️
        self.assertEqual(ev.naive_counts(self.r), (1, 2))

    def test_full_family_bound(self):
        b = bench("a", ev.RED, 100, 140, 0.4, p=0.001)
        self.assertTrue(ev.red_under_family(b, 8, 0.05))  # 0.008 < 0.05
        self.assertFalse(ev.red_under_family(b, 60, 0.05))  # 0.06
        b["status"] = ev.WARN
        self.assertFalse(ev.red_under_family(b, 8, 0.05))


class Aggregation(unittest.TestCase):
    def test_aa(self):
        t1 = {"results": results([bench("a", ev.WARN, 100, 100, 0.0),
                                  bench("b", ev.WARN, 100, 135, 0.0)])}
        t2 = {"results": results([bench("a", "no_change", 100, 100, 0.0),
                                  bench("b", ev.RED, 100, 100, 0.0)])}
        agg = ev.aggregate_aa([t1, t2])
        self.assertEqual(agg["gate"], {"runs": 2, "red": 1, "runs_with_red": 1, "warn": 2,
                                       "max_warn_per_run": 2, "runs_with_2_warn": 1,
                                       "too_noisy_per_run": 0.0, "round_sd_median": None,
                                       "round_sd_p75": None, "threshold_median": 0.03})
        self.assertEqual(agg["naive"]["red"], 1)
        self.assertEqual(agg["naive"]["warn"], 0)

    def test_round_noise_pairs_rounds_by_index(self):
        b = bench("a", "no_change", 100, 100)
        # Head rounds 0..3 at 100, 110, 100, 110; base round 2 is missing (invalid sample file).
        b["head"] = side(100, rounds=4)
        b["head"]["per_round_ns"] = [100.0, 110.0, 100.0, 110.0]
        b["base"] = side(100, rounds=4)
        del b["base"]["samples"][2]
        b["base"]["per_round_ns"] = [100.0, 100.0, 100.0]
        lr = ev.round_log_ratios(b)
        self.assertEqual(len(lr), 3)
        self.assertAlmostEqual(lr[1], math.log(1.1))  # round 1 with round 1, not with round 2
        self.assertAlmostEqual(lr[2], math.log(1.1))  # round 3
        n = ev.noise_stats([{"results": results([b])}])
        self.assertAlmostEqual(n["round_sd_median"], statistics.stdev(lr))
        # Samples and estimates that do not line up are not guessed at.
        b["base"]["per_round_ns"] = [100.0, 100.0]
        self.assertEqual(ev.round_log_ratios(b), [])

    def test_inject_detection_and_controls(self):
        def trial(tgt_status, tgt_head, ctrl_status):
            return {"results": results([
                bench("t", tgt_status, 100, tgt_head, tgt_head / 100 - 1, p=0.001),
                bench("c", ctrl_status, 100, 100, 0.0),
                bench("other", ev.RED, 100, 100, 0.0),  # neither target nor control: ignored
            ])}
        ts = [trial(ev.RED, 105, "no_change"), trial(ev.WARN, 105, ev.WARN),
              trial("no_change", 105, "no_change"), trial(ev.RED, 135, ev.RED)]
        agg = ev.aggregate_inject(ts, {"t"}, {"c"}, family_full=40)
        g, n = agg["gate"], agg["naive"]
        self.assertEqual((g["observations"], g["red"], g["red_or_warn"]), (4, 2, 3))
        self.assertEqual(g["detection_red"], 50.0)
        self.assertEqual(g["detection_red_or_warn"], 75.0)
        self.assertEqual((g["control_red"], g["control_warn"], g["control_observations"]),
                         (1, 1, 4))
        self.assertEqual(g["red_full_family"], 2)  # 0.001 · 40 < 0.05
        self.assertAlmostEqual(g["median_change"], 0.05)
        self.assertEqual((n["red"], n["red_or_warn"]), (1, 1))
        self.assertEqual(n["control_red"], 0)


class Pairing(unittest.TestCase):
    def test_the_method_of_a_trial_comes_from_its_results(self):
        def trial(**method):
            return {"results": {"method": method}}
        by_bench = "ABBA (AB on even rounds, BA on odd), one benchmark at a time"
        self.assertEqual(ev.pairing(trial(order=by_bench, sampling="paired: both sides …")),
                         "sample")
        # A run in which some target fell back to criterion runs is not a paired run.
        self.assertEqual(ev.pairing(trial(order=by_bench, sampling="paired: …; criterion runs "
                                                                    "for decode (…)")), "bench")
        self.assertEqual(ev.pairing(trial(order=by_bench)), "bench")
        self.assertEqual(ev.pairing(trial(order="ABBA")), "target")


class PolicyLabel(unittest.TestCase):
    def test_noise_rounds_keep_trials_apart(self):
        def trial(policy):
            return {"results": {"method": {"policy": policy} if policy else {}}}
        self.assertEqual(ev.policy_label(trial(None)), "noise_k 2.5, max_threshold 0.15")
        old = {"noise_k": 2.5, "max_threshold": 0.2, "noise_rounds": 0}
        self.assertEqual(ev.policy_label(trial(old)), "noise_k 2.5, max_threshold 0.2")
        new = {**old, "noise_rounds": 6, "noise_target": 0.06}
        self.assertEqual(ev.policy_label(trial(new)),
                         "noise_k 2.5, max_threshold 0.2, noise_rounds 6 above 0.06")
        # First-pass rounds other than the 6 of every earlier trial keep trials apart too.
        eight = {"results": {"method": {"policy": new, "rounds": 8}}}
        self.assertEqual(ev.policy_label(eight),
                         "noise_k 2.5, max_threshold 0.2, noise_rounds 6 above 0.06, 8 rounds")
        six = {"results": {"method": {"policy": new, "rounds": 6}}}
        self.assertEqual(ev.policy_label(six), ev.policy_label(trial(new)))
        # Wall times too: noise rounds add measured rounds.
        self.assertEqual(ev.noise_label(trial(None)), "none")
        self.assertEqual(ev.noise_label(trial(old)), "none")
        self.assertEqual(ev.noise_label(trial(new)), "6 above 6 %")


class SpinLabel(unittest.TestCase):
    def test_rates_from_another_revision_are_labelled_apart(self):
        def trial(src):
            return {"rev": "455f761fcf40", "spin_rate": "in-context",
                    "targets": {"a": {"rate_source": src}}}
        self.assertEqual(ev.spin_label(trial("x/inject, trials of 455f761fcf40")), "in-context")
        other = ev.spin_label(trial("x/inject, trials of f08c84c8b659"))
        self.assertEqual(other, "in-context from f08c84c")
        self.assertEqual(ev.size_label({"size_pct": 5.0, "spin_rate": other}), "5 % (ctx f08c84c)")
        self.assertEqual(ev.size_label({"size_pct": 5.0, "spin_rate": "in-context"}), "5 % (ctx)")
        self.assertEqual(ev.spin_label({"spin_rate": "standalone"}), "standalone")
        # Trials from before rate_source was recorded: same-revision rates.
        self.assertEqual(ev.spin_label({"rev": "f08c", "spin_rate": "in-context",
                                        "targets": {"a": {}}}), "in-context")


class Summary(unittest.TestCase):
    def test_summarize_reads_trial_dirs_and_renders(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            host = {"cpu": "Test CPU", "cores": 2, "uname": "Linux"}

            def write(rel, rec, res):
                d = root / rel
                d.mkdir(parents=True)
                (d / "trial.json").write_text(json.dumps(rec))
                (d / "results.json").write_text(json.dumps(res))

            base = {"rev": "abc", "host": host, "rounds_arg": None, "cache_dir": "default",
                    "setup_s": 5.0, "evaluate_argv": ["evaluate.py", "aa", "--runs", "2"]}
            for i, st in enumerate([ev.WARN, "no_change"]):
                write(f"d/aa/full-none/run-{i}", {**base, "kind": "aa", "suite": "full",
                                                  "load": {"kind": "none"}, "wall_s": 100.0 + i},
                      results([bench("x", st, 100, 100, 0.0)], rounds=6))
            # The same scenario with 8 first-pass rounds: its own A/A and wall-time rows.
            r8 = results([bench("x", "no_change", 100, 100, 0.0)], rounds=8)
            # Its last round ends at 1110 s and its results were written at 1130 s: 20 s after.
            r8["rounds"] = [{"index": 0, "started_unix_s": 1000.0, "duration_s": 60.0},
                            {"index": 1, "started_unix_s": 1060.0, "duration_s": 50.0}]
            r8["created_unix_s"] = 1130.0
            write("d8/aa/full-none/run-001", {**base, "kind": "aa", "suite": "full",
                                              "load": {"kind": "none"}, "wall_s": 140.0}, r8)
            write("d/inject/5pct/trial-001", {
                **base, "kind": "inject", "suite": "eval", "size_pct": 5.0, "wall_s": 300.0,
                "targets": {"t": {"class": "st", "spins": 10, "injected_ns": 5.0,
                                  "base_ns": 100.0},
                            "m": {"class": "mt", "spins": 10, "injected_ns": 5.0,
                                  "base_ns": 100.0}},
                "controls": ["c"],
            }, results([bench("t", ev.RED, 100, 105, 0.05, p=1e-4),
                        bench("m", "no_change", 100, 105, 0.05),
                        bench("c", "no_change", 100, 100, 0.0)]))
            # The same scenario measured by the harness before benchmark-by-benchmark pairing:
            # its own row, never pooled with the new one.
            write("old/aa/full-none/run-001", {**base, "kind": "aa", "suite": "full",
                                               "load": {"kind": "none"}, "wall_s": 90.0},
                  results([bench("x", ev.RED, 100, 150, 0.4, p=1e-4)], order=BY_TARGET))
            # Decided under a recorded policy: its own row too.
            write("new/aa/full-none/run-001", {**base, "kind": "aa", "suite": "full",
                                               "load": {"kind": "none"}, "wall_s": 90.0},
                  results([bench("x", "no_change", 100, 100, 0.0)],
                          policy={"noise_k": 2.5, "max_threshold": 0.25, "floor": 0.03}))
            write("d/aa/broken.tmp", {**base, "kind": "aa"}, {})  # interrupted: ignored
            trials = ev.load_trials(root)
            self.assertEqual(len(trials), 6)
            s = ev.summarize(trials, family_full=40)
            walls = {(r["first_pass_rounds"], r["pairing"]): (r["runs"], r["median_s"])
                     for r in s["walltime"] if r["kind"] == "aa"}
            self.assertEqual(walls[(6, "bench")], (2, 100.5))
            self.assertEqual(walls[(8, "bench")], (1, 140.0))
            eight = next(r for r in s["walltime"] if r["first_pass_rounds"] == 8)
            self.assertEqual((eight["median_after_s"], eight["max_after_s"]), (20.0, 20.0))
            six = next(r for r in s["walltime"] if r["first_pass_rounds"] == 6)
            self.assertIsNone(six["median_after_s"])  # no round times recorded
            by_pairing = {r["pairing"]: r for r in s["aa"]
                          if r["policy"] == "noise_k 2.5, max_threshold 0.15"}
            recorded = [r for r in s["aa"] if r["policy"] == "noise_k 2.5, max_threshold 0.25"]
            self.assertEqual([r["gate"]["runs"] for r in recorded], [1])
            self.assertEqual(by_pairing["bench"]["gate"]["runs"], 2)
            self.assertEqual(by_pairing["bench"]["gate"]["warn"], 1)
            self.assertEqual(by_pairing["bench"]["gate"]["red"], 0)
            self.assertEqual(by_pairing["bench"]["gate"]["max_warn_per_run"], 1)
            self.assertEqual((by_pairing["target"]["gate"]["runs"],
                              by_pairing["target"]["gate"]["red"]), (1, 1))
            st = next(r for r in s["inject"] if r["class"] == "st")
            mt = next(r for r in s["inject"] if r["class"] == "mt")
            self.assertEqual(st["gate"]["detection_red"], 100.0)
            self.assertEqual(mt["gate"]["detection_red"], 0.0)
            self.assertAlmostEqual(st["injected_fraction"], 0.05)
            md = ev.render_md(s, "now")
            self.assertIn(
                "| gate | bench | noise_k 2.5, max_threshold 0.15 | full (1 benches) | none | default | "
                "2 | 0 | 0 | 1 | 1 | 0 | 0.0 |",
                md)
            self.assertIn(
                "| gate | target | noise_k 2.5, max_threshold 0.15 | full (1 benches) | none | "
                "default | 1 | 1 | 1 | 0 | 0 | 0 |", md)
            self.assertIn("| bench | 5 % | `t` | ST | 1 | 100 % | 100 % | 0 % | 0 % | +5.0 % |", md)
            self.assertIn("| gate | bench | noise_k 2.5, max_threshold 0.15 | 5 % | ST | eval | "
                          "default | 1 | 1 | 100 % (1) |", md)
            self.assertIn("Test CPU, 2 cores", md)
            short = ev.render_readme(s, "now")
            self.assertIn("| **gate**, full suite (1), load: none, pairs: bench, noise_k 2.5, "
                          "max_threshold 0.15 | 2 | 0 (0) | 1, 1 |", short)
            self.assertIn("| 5 % | +5.0 % | ST | bench | noise_k 2.5, max_threshold 0.15 | 1 | "
                          "100 % | 100 % | 0 % | 0 % | 0 / 0 of 1 |", short)
            self.assertIn("python3 harness/eval/evaluate.py aa --runs 2", md)
            self.assertIn("| aa | bench | full | ?+? s | none | warm | 8 | 1 | 2.3 min | "
                          "2.3 min … 2.3 min | 5 s | 5 s | 20 s | 20 s |", md)
            self.assertIn("| aa, full suite | bench | ?+? s | 6 | none | warm | 2 | 1.7 min |",
                          short)


class Replays(unittest.TestCase):
    def test_variants_render_one_row_per_scenario_and_summarize_reads_them(self):
        aa = [{"suite": "full", "load": "one-core",
               "gate": {"runs": 4, "red": 0, "runs_with_red": 0, "warn": 3,
                        "max_warn_per_run": 2, "too_noisy_per_run": 20.5,
                        "threshold_median": 0.112}}]
        inj = [{"size_pct": 5.0, "spin_rate": "in-context", "class": "st", "trials": 10,
                "gate": {"detection_red": 40.0, "detection_red_or_warn": 55.0,
                         "control_red": 0, "control_warn": 1, "control_observations": 50}}]
        rec = {"label": "k2", "policy": '{"noise_k": 2}', "rounds": None, "aa": aa,
               "inject": inj}
        md = "\n".join(ev.render_replays([rec]))
        self.assertIn('| k2 | `{"noise_k": 2}` | recorded | full, load one-core, pairs bench | 4 '
                      '| 0 (0) | 3, 2 | 20.5 | 11.2 % |', md)
        self.assertIn("| k2 | 5 % (ctx) | ST | bench | 10 | 40 % | 55 % | 0 / 1 (50) |", md)
        # Paired-sampling rows are told apart from the rest.
        rec["aa"][0]["pairing"] = "sample"
        md = "\n".join(ev.render_replays([rec]))
        self.assertIn("| full, load one-core, pairs sample | 4 |", md)
        self.assertEqual(ev.render_replays([]), [])
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "replay").mkdir()
            (Path(tmp) / "replay" / "k2.json").write_text(json.dumps(rec))
            self.assertEqual(ev.load_replays(tmp)[0]["label"], "k2")
            self.assertEqual(ev.load_trials(tmp), [], "a replay is not a trial")


class Readme(unittest.TestCase):
    def test_the_table_goes_between_the_markers_and_nothing_else_moves(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / "README.md"
            p.write_text(f"# T\n\nbefore\n{ev.README_START}\nold\n{ev.README_END}\nafter\n")
            ev.splice_readme(p, "| new |")
            self.assertEqual(
                p.read_text(),
                f"# T\n\nbefore\n{ev.README_START}\n| new |\n{ev.README_END}\nafter\n")
            ev.splice_readme(p, "| newer |")  # idempotent: replaces, never appends
            self.assertEqual(p.read_text().count("| new"), 1)
            p.write_text("no markers\n")
            with self.assertRaises(SystemExit):
                ev.splice_readme(p, "x")
            self.assertEqual(p.read_text(), "no markers\n")


class Injection(unittest.TestCase):
    def test_blocks_go_after_their_anchor_and_anchors_must_be_unique(self):
        text = "fn a() {\n    x\n}\n"
        out = ev.inject_text(text, "f.rs", [("fn a() {\n", "    SPIN\n")])
        self.assertEqual(out, "fn a() {\n    SPIN\n    x\n}\n")
        with self.assertRaises(SystemExit):
            ev.inject_text(text + text, "f.rs", [("fn a() {\n", "    SPIN\n")])
        with self.assertRaises(SystemExit):
            ev.inject_text(text, "f.rs", [("fn b() {\n", "    SPIN\n")])

    def test_spin_count(self):
        # 5 % of 20 µs at 2 ns per spin = 500 spins
        self.assertEqual(ev.spins_for(5, 20_000, 2.0), 500)
        self.assertEqual(ev.spins_for(0.001, 10, 2.0), 1)

    def test_in_context_rate_is_the_median_slowdown_per_spin_of_earlier_trials(self):
        def trial(est, spins, rev="abc", kind="inject"):
            return {"kind": kind, "rev": rev, "targets": {"t": {"class": "st", "spins": spins}},
                    "results": results([bench("t", "no_change", 100, 100, est)])}

        # 0.05/1000, 0.12/2000, 0.07/1000, 0.06/1000, 0.2/2000 per spin: median 6e-5.
        ts = [trial(0.05, 1000), trial(0.12, 2000), trial(0.07, 1000), trial(0.06, 1000),
              trial(0.2, 2000)]
        rates = ev.spin_rates_in_context(ts, "abc")
        self.assertAlmostEqual(rates["t"]["rel_per_spin"], 6e-5)
        self.assertEqual(rates["t"]["trials"], 5)
        # 5 % at 6e-5 per spin: 833 spins, not the 1000 that gave +5 % .. +7 %.
        self.assertEqual(ev.spins_in_context(5, rates["t"]["rel_per_spin"]), 833)
        # Other revisions, A/A trials and rows without an estimate do not count; too few is none.
        noise = [trial(0.5, 10, rev="other"), trial(0.5, 10, kind="aa"), trial(None, 1000)]
        self.assertEqual(ev.spin_rates_in_context(ts[:4] + noise, "abc"), {})
        self.assertEqual(ev.spin_rates_in_context(ts[:4], "abc", min_trials=4)["t"]["trials"], 4)

    def test_eval_suite_lists_exact_ids(self):
        text = ev.eval_config_text(
            "packages: [engine]\nsuites:\n  quick:\n    benches:\n      kernels: []\n"
            "policy:\n  rounds: 6\n")
        self.assertIn("  eval:\n", text)
        self.assertIn("'^add/f32/medium$'", text)
        self.assertLess(text.index("  eval:"), text.index("policy:"))


if __name__ == "__main__":
    unittest.main()
