"""The A/A rule of README.md step 2 for a candidate ground-truth method: every row of an A/A
`ground_truth.json` (the base's executables on both sides) must have a 95 % interval that holds
0 and lies within ±EDGE, and the file must hold exactly N rows. Prints a line per row and the
verdict; exit 0 when accepted, 1 when rejected.

    python3 aa_rule.py checks/i-t2-paired-aa/in-pool-one-thread-hand-off/ground-truth.json 0.10 9
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import saved  # noqa: E402


def row_holds(ci95, edge):
    """True when the interval is known, holds 0 and lies within ±edge."""
    lo, hi = ci95
    return lo is not None and hi is not None and lo <= 0 <= hi and -edge <= lo and hi <= edge


def judge(truth, edge, n):
    """(accepted, lines) for an A/A truth's rows."""
    rows = truth["rows"]
    ok = len(rows) == n
    lines = []
    for bench, r in sorted(rows.items()):
        good = row_holds(r["ci95"], edge)
        lo, hi = r["ci95"]
        shown = "[?]" if lo is None or hi is None else f"[{lo * 100:+.1f}, {hi * 100:+.1f}]"
        lines.append(f"{bench}: {r['change'] * 100:+.1f} % {shown} {'ok' if good else 'FAILS'}")
        ok = ok and good
    lines.append(f"{len(rows)} rows (expected {n}): {'ACCEPTED' if ok else 'REJECTED'}")
    return ok, lines


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    path, edge, n = argv[1], float(argv[2]), int(argv[3])
    try:
        truth = saved.load_json(path)
    except (OSError, ValueError) as e:
        sys.exit(f"aa_rule: cannot read {path}: {e}")
    ok, lines = judge(truth, edge, n)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
