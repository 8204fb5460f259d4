"""The CPU kind of this machine, as the eval scripts record it beside their numbers.

The model name alone does not identify a VM kind: two AMD EPYC VMs of the same name ran one patch
at −1.5 % and +25 % (corpus/README.md, finding 16), so runs also record the CPU family, model and
stepping, read from /proc/cpuinfo (the harness's own host facts, harness/src/host.rs, name the
model only)."""

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu_model(cpuinfo=CPUINFO):
    """`model name` of the first processor, "unknown" when it cannot be read."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def cpu_id(cpuinfo=CPUINFO):
    """The first processor's family, model and stepping, e.g. "family 25 model 17 stepping 1";
    None when any of the three is missing (an unknown kind is never taken for a known one)."""
    want, got = ("cpu family", "model", "stepping"), {}
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            k, _, v = line.partition(":")
            k = k.strip()
            if k in want and k not in got:
                got[k] = v.strip()
            if not line.strip() and got:
                break
    except OSError:
        pass
    if len(got) < len(want):
        return None
    return f"family {got['cpu family']} model {got['model']} stepping {got['stepping']}"
