"""Creates (once) the project's Python venv for ONNX Runtime work and re-executes a script in it.

Used by the scripts in this folder: `python3 goldens/<script>.py` works on a fresh machine with only
Python 3 and pip; the venv lives in `.venv/goldens` (git-ignored) and is rebuilt when
`requirements.txt` changes.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv" / "goldens"
REQS = ROOT / "goldens" / "requirements.txt"


def _python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> Path:
    stamp = VENV / "requirements.sha256"
    want = hashlib.sha256(REQS.read_bytes()).hexdigest()
    if _python().exists() and stamp.exists() and stamp.read_text().strip() == want:
        return _python()
    print(f"setting up {VENV.relative_to(ROOT)} from {REQS.relative_to(ROOT)} ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "-r", str(REQS)], check=True)
    stamp.write_text(want + "\n")
    return _python()


def reexec_in_venv() -> None:
    """Re-runs the calling script inside the venv unless already there, or unless
    `GOLDENS_SYSTEM_PYTHON=1` says the running interpreter already has the packages (a GPU
    machine without network, where pip cannot build the venv)."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    if os.environ.get("GOLDENS_SYSTEM_PYTHON") == "1":
        return
    py = ensure_venv()
    os.execv(str(py), [str(py), *sys.argv])
