#!/usr/bin/env python3
"""GFLOP/s of the engine's MatMul benches next to the gemm crate called directly and the peak.

Runs `matmul` and `gemm_reference` (default criterion settings unless --quick) into a private
CRITERION_HOME, then prints one markdown table from criterion's estimates (median ns/iter).
Usage: python3 engine/benches/matmul_report.py [--quick] [--ghz 2.1]
"""
import argparse, glob, json, os, subprocess, sys, tempfile

SHAPES = [(1, 256, 256), (32, 512, 512), (32, 1024, 1024)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="short criterion settings")
    ap.add_argument("--ghz", type=float, default=None, help="clock for the peak (default: /proc/cpuinfo)")
    ap.add_argument("--criterion-home", default=None, help="reuse an existing criterion dir")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    home = a.criterion_home
    if home is None:
        home = tempfile.mkdtemp(prefix="matmul-report-")
        out = subprocess.run(["cargo", "bench", "-p", "engine", "--bench", "matmul", "--bench",
                              "gemm_reference", "--no-run", "--message-format=json"],
                             cwd=root, check=True, capture_output=True, text=True).stdout
        exes = [json.loads(l)["executable"] for l in out.splitlines()
                if l.startswith("{") and json.loads(l).get("executable")
                and "bench" in json.loads(l)["target"]["kind"]]
        args = ["--bench", "--noplot"]
        if a.quick:
            args += ["--warm-up-time", "0.5", "--measurement-time", "1", "--nresamples", "1000"]
        for exe in exes:
            subprocess.run([exe] + args, env={**os.environ, "CRITERION_HOME": home}, check=True,
                           stdout=subprocess.DEVNULL)
    ghz = a.ghz
    if ghz is None:
        with open("/proc/cpuinfo") as f:
            ghz = next(float(l.split(":")[1]) for l in f if l.startswith("cpu MHz")) / 1000
    cores = os.cpu_count()
    flags = open("/proc/cpuinfo").read()
    lanes = 16 if " avx512f" in flags else 8  # f32 lanes per FMA; 2 FMA ports assumed
    peak1 = 2 * 2 * lanes * ghz  # GFLOP/s per core: 2 ports x lanes x (mul+add)

    def median_ns(group, func, param):
        p = os.path.join(home, group, func, param, "new", "estimates.json")
        if not os.path.exists(p):
            return None
        return json.load(open(p))["median"]["point_estimate"]

    print(f"peak: {peak1:.0f} GFLOP/s per core ({lanes}-lane FMA x 2 ports at {ghz:.2f} GHz), "
          f"{peak1 * cores:.0f} on {cores} cores")
    print()
    print("| shape | dtype | threads | engine GFLOP/s | gemm direct GFLOP/s | engine / gemm | % of peak |")
    print("|---|---|---|---|---|---|---|")
    for t in sorted({1, cores}):
        for dt in ["f32", "f16", "bf16"]:
            for (m, k, n) in SHAPES:
                shape = f"{m}x{k}x{n}"
                flop = 2 * m * k * n
                e = median_ns("matmul", f"{dt}_t{t}", shape)
                ref_dt = "f32" if dt == "bf16" else dt
                g = median_ns("gemm_reference", f"{ref_dt}_t{t}", shape)
                eg = flop / e if e else None
                gg = flop / g if g else None
                ratio = f"{eg / gg:.2f}" if eg and gg else "-"
                gtxt = f"{gg:.1f}" + (" (f32)" if dt == "bf16" else "") if gg else "-"
                etxt = f"{eg:.1f}" if eg else "-"
                pk = f"{100 * eg / (peak1 * t):.0f} %" if eg else "-"
                print(f"| {shape} | {dt} | {t} | {etxt} | {gtxt} | {ratio} | {pk} |")
    print(f"\ncriterion dir: {home}", file=sys.stderr)


if __name__ == "__main__":
    main()
