"""The pure parts of ground_truth.py: the round estimate and the signed-rank interval."""

import unittest

import ground_truth as gt


class GroundTruthTest(unittest.TestCase):
    def test_placement_seeds_are_apart_by_side_and_from_the_gates(self):
        base, case = gt.placement_seeds("base", 30), gt.placement_seeds("case", 30)
        self.assertEqual(len(set(base) | set(case)), 60)
        self.assertEqual(base[:2], [1001, 1003])
        self.assertEqual(case[:2], [1002, 1004])
        # The gate's seeds are 2r+1 and 2r+2 over its rounds (at most a few hundred).
        self.assertGreater(min(base + case), 1000)

    def test_lower_quartile_is_type_7(self):
        self.assertEqual(gt.lower_quartile([1, 2, 3, 4, 5]), 2)
        self.assertAlmostEqual(gt.lower_quartile([1, 2, 3, 4]), 1.75)
        self.assertIsNone(gt.lower_quartile([]))

    def test_round_value_is_per_iteration(self):
        self.assertEqual(gt.round_value({"iters": [2, 2, 2, 2, 2], "times": [20, 40, 60, 80, 100]}), 20)

    def test_signed_rank_distribution_matches_the_table(self):
        cdf = gt.signed_rank_cdf(10)
        # n = 10: P(W+ <= 10) = 43/1024 and P(W+ <= 8) = 25/1024 (standard table values 10 / 8).
        self.assertAlmostEqual(cdf[10], 43 / 1024)
        self.assertAlmostEqual(cdf[8], 25 / 1024)
        self.assertEqual(cdf[-1], 1.0)

    def test_hodges_lehmann_by_hand(self):
        est, lo, hi = gt.hodges_lehmann([4.0, 1.0, 2.0], confidence=0.75)
        # Walsh averages 1, 1.5, 2, 2.5, 3, 4; P(W+ = 0) = 1/8 = the tail: one cut per end.
        self.assertEqual((est, lo, hi), (2.25, 1.0, 4.0))
        # Three rounds cannot reach 95 %.
        self.assertEqual(gt.hodges_lehmann([4.0, 1.0, 2.0])[1:], (None, None))

    def test_side_value_is_the_median_process(self):
        # Three processes of one target, one slow for its whole life: the median ignores it.
        runs = [{"a": 1.0, "b": 5.0}, {"a": 9.0, "b": 4.0}, {"a": 1.2, "b": 6.0},
                {"c": 3.0}]  # another target's process: only its own benchmark
        self.assertEqual(gt.side_values(runs), {"a": 1.2, "b": 5.0, "c": 3.0})
        # An even count takes the upper median: one process's own value.
        self.assertEqual(gt.side_values([{"a": 2.0}, {"a": 1.0}]), {"a": 2.0})

    def test_process_order_alternates_within_and_across_rounds(self):
        self.assertEqual(gt.process_order(0, 1), ["base", "case"])
        self.assertEqual(gt.process_order(1, 1), ["case", "base"])
        self.assertEqual(gt.process_order(0, 3),
                         ["base", "case", "case", "base", "base", "case"])
        self.assertEqual(gt.process_order(1, 2), ["case", "base", "base", "case"])

    def test_paired_round_compares_each_pair_in_its_own_time(self):
        import math
        # Three pairs; the machine's speed level moves between pairs (1.0, then 1.5, then 1.0),
        # the case is 10 % slower within each pair. Side medians would mix the levels; the
        # pairs' median ratio is exactly 1.1.
        base = [{"a": 1.0}, {"a": 1.5}, {"a": 1.0, "b": 2.0}]
        case = [{"a": 1.1}, {"a": 1.65}, {"a": 1.1, "b": 3.0}]
        out = gt.paired_round(base, case)
        self.assertAlmostEqual(out["a"][0], math.log(1.1))
        self.assertEqual(len(out["a"][1]), 3)
        # A benchmark only one pair reports has that pair's ratio.
        self.assertAlmostEqual(out["b"][0], math.log(1.5))
        # A pair where one side lacks the benchmark is left out, not paired across time.
        out = gt.paired_round([{"a": 1.0}, {"a": 2.0}], [{}, {"a": 2.2}])
        self.assertEqual(len(out["a"][1]), 1)
        self.assertAlmostEqual(out["a"][0], math.log(1.1))
        # The median, not the mean: one pair straddling a level change does not move it.
        out = gt.paired_round([{"a": 1.0}, {"a": 1.0}, {"a": 1.0}],
                              [{"a": 1.1}, {"a": 1.6}, {"a": 1.1}])
        self.assertAlmostEqual(out["a"][0], math.log(1.1))


if __name__ == "__main__":
    unittest.main()
