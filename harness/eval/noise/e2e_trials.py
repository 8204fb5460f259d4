#!/usr/bin/env python3
"""Tabulates the end-to-end trials of a case (gate_cases.py runs under
harness/eval/results/noise/<dir>/<case>/run-*): per speed row, how many trials gave each status,
with the Clopper-Pearson 95 % interval of the 🔴 rate, and each run's estimates.

    e2e_trials.py harness/eval/results/noise/cases/decode-eager-node-names
Standard library only.
"""
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path as _Path

sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import saved  # noqa: E402


def beta_ppf(p, a, b):
    """Quantile of Beta(a, b) by bisection on the regularised incomplete beta (continued fraction)."""
    def betacf(x):
        tiny, qab, qap, qam = 1e-300, a + b, a + 1, a - 1
        c, d = 1.0, 1 - qab * x / qap
        d = 1 / (d if abs(d) > tiny else tiny)
        h = d
        for m in range(1, 300):
            m2 = 2 * m
            aa = m * (b - m) * x / ((qam + m2) * (a + m2))
            d = 1 + aa * d; d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
            h *= d * c
            aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
            d = 1 + aa * d; d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
            de = d * c
            h *= de
            if abs(de - 1) < 1e-12:
                break
        return h

    def cdf(x):
        if x <= 0:
            return 0.0
        if x >= 1:
            return 1.0
        lb = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
        if x < (a + 1) / (a + b + 2):
            return math.exp(lb) * betacf(x) / a
        a2, b2 = b, a
        return 1 - math.exp(lb) * beta_cf_swap(1 - x, a2, b2) / b

    def beta_cf_swap(x, a2, b2):
        nonlocal a, b
        a, b = a2, b2
        try:
            return betacf(x)
        finally:
            a, b = b2, a2

    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(k, n, alpha=0.05):
    lo = 0.0 if k == 0 else beta_ppf(alpha / 2, k, n - k + 1)
    hi = 1.0 if k == n else beta_ppf(1 - alpha / 2, k + 1, n - k)
    return lo, hi


def main():
    runs = [str(p) for p in saved.glob(sys.argv[1], "run-*/results.json")]
    statuses = defaultdict(Counter)
    for path in runs:
        r = saved.load_json(path)
        for s in r["e2e"]["speed"]:
            if s.get("not_run"):
                continue
            statuses[s["id"]][s["status"]] += 1
    n = len(runs)
    print(f"{n} trials ({sys.argv[1]})\n")
    print("| row | " + " | ".join(["🔴", "⚠️", "❔", "✅", "🟢"]) + " | 🔴 rate [95 % CP] |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for rid, c in sorted(statuses.items()):
        k = c["regression"]
        lo, hi = clopper_pearson(k, n)
        cells = [c["regression"], c["possible_regression"], c["too_noisy"], c["no_change"], c["improvement"]]
        print(f"| `{rid}` | " + " | ".join(str(x) for x in cells) + f" | {k}/{n} [{lo * 100:.1f}, {hi * 100:.1f}] % |")


if __name__ == "__main__":
    main()
