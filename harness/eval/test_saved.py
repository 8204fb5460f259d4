"""Tests of saved.py: a compressed saved file reads as its plain form did."""

import gzip
import json
import tempfile
import unittest
from pathlib import Path

import saved


class SavedTest(unittest.TestCase):
    def test_compressed_reads_as_plain_and_small_files_stay_plain(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            big = {"benches": [{"id": f"b{i}", "samples": list(range(300))} for i in range(200)]}
            (d / "run-001").mkdir()
            p = d / "run-001" / "results.json"
            p.write_text(json.dumps(big))
            self.assertGreaterEqual(p.stat().st_size, saved.COMPRESS_FROM_BYTES)
            gz = saved.compress_saved(p)
            self.assertEqual(gz.name, "results.json.gz")
            self.assertFalse(p.exists())
            self.assertEqual(gzip.decompress(gz.read_bytes()), json.dumps(big).encode())
            # Deterministic bytes: the same text compresses to the same file.
            first = gz.read_bytes()
            p.write_text(json.dumps(big))
            gz.unlink()
            self.assertEqual(saved.compress_saved(p).read_bytes(), first)
            # Read by the plain name, by the .gz name, and found by glob under the plain name.
            self.assertEqual(saved.load_json(p), big)
            self.assertEqual(saved.load_json(gz), big)
            self.assertEqual(saved.glob(d, "run-*/results.json"), [p])
            small = d / "small.json"
            small.write_text("{}")
            self.assertEqual(saved.compress_saved(small), small)
            self.assertEqual(saved.load_json(small), {})
            with self.assertRaises(FileNotFoundError):
                saved.load_json(d / "none.json")


if __name__ == "__main__":
    unittest.main()
