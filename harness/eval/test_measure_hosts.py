"""Unit tests of corpus/measure.py's one-host-kind-per-case rule."""

import importlib.util
import json
import tempfile
import unittest
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "measure", Path(__file__).resolve().parent / "corpus" / "measure.py"
)
measure = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(measure)

EPYC, XEON = "AMD EPYC", "Intel(R) Xeon(R) Processor"


class HostsTest(unittest.TestCase):
    def test_a_case_begun_on_another_model_is_left_alone(self):
        hosts = {"a": {"cpu": EPYC, "steps": {"truth": EPYC}}}
        self.assertEqual(measure.begun_elsewhere(hosts, "a", XEON), EPYC)
        self.assertIsNone(measure.begun_elsewhere(hosts, "a", EPYC))
        self.assertIsNone(measure.begun_elsewhere(hosts, "b", XEON), "not begun: any host")

    def test_the_first_step_fixes_the_model_and_later_ones_are_recorded(self):
        with tempfile.TemporaryDirectory() as d:
            old = measure.HOSTS
            measure.HOSTS = Path(d) / "hosts.json"
            try:
                measure.record_host("a", "truth", XEON)
                measure.record_host("a", "quiet", XEON)
                measure.record_host("b", "truth", EPYC)
                hosts = json.loads(measure.HOSTS.read_text())
            finally:
                measure.HOSTS = old
        self.assertEqual(hosts["a"], {"cpu": XEON, "steps": {"truth": XEON, "quiet": XEON}})
        self.assertEqual(measure.begun_elsewhere(hosts, "b", XEON), EPYC)

    def test_this_hosts_model_is_read(self):
        self.assertTrue(measure.host_cpu())


if __name__ == "__main__":
    unittest.main()
