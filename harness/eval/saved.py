"""Reading the runs saved under harness/eval/results/: a large JSON file (a `results.json` of
raw samples, a `noise.json`) is kept gzip-compressed as `NAME.json.gz` (about 7× smaller, so a
clone and a copied working tree stay small), and every reader takes either form. Standard
library only."""

import gzip
import json
from pathlib import Path

# Saved JSON files at or above this size are committed compressed (compress_saved below):
# almost every saved run; a small file stays plain, readable in a diff.
COMPRESS_FROM_BYTES = 16_000


def find(path):
    """`path` if it exists, else `path` + `.gz` if that exists, else None."""
    path = Path(path)
    if path.is_file():
        return path
    gz = path.with_name(path.name + ".gz")
    return gz if gz.is_file() else None


def load_json(path):
    """The JSON of `path` or of `path.gz` (whichever exists; FileNotFoundError if neither)."""
    found = find(path)
    if found is None:
        raise FileNotFoundError(f"{path} (nor {Path(path).name}.gz)")
    if found.suffix == ".gz":
        with gzip.open(found, "rt", encoding="utf-8") as f:
            return json.load(f)
    return json.loads(found.read_text())


def glob(root, pattern):
    """Path(root).glob(pattern) of saved JSON files, each found plain or compressed (as the
    plain name's path, for load_json), sorted."""
    root = Path(root)
    hits = {p for p in root.glob(pattern)}
    hits |= {p.with_name(p.name[:-3]) for p in root.glob(pattern + ".gz")}
    return sorted(hits)


def compress_saved(path):
    """Replaces a saved JSON file of COMPRESS_FROM_BYTES or more by `NAME.gz` (mtime 0 in the
    header, so the same text always gives the same bytes); returns the path now holding it."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < COMPRESS_FROM_BYTES:
        return path
    gz = path.with_name(path.name + ".gz")
    with open(gz, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                              compresslevel=9, mtime=0) as f:
        f.write(data)
    path.unlink()
    return gz
