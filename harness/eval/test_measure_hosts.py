"""Unit tests of corpus/measure.py's one-host-kind-per-case rule and its sitting times."""

import importlib.util
import json
import os
import subprocess
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
        self.assertRegex(measure.host_cpu_id() or "", r"^family \d+ model \d+ stepping \d+$")

    def test_one_model_name_of_another_family_or_model_is_elsewhere(self):
        zen4, zen3 = "family 25 model 17 stepping 1", "family 25 model 1 stepping 1"
        hosts = {"a": {"cpu": EPYC, "cpu_id": zen4, "steps": {"truth": EPYC}},
                 "old": {"cpu": EPYC, "steps": {"truth": EPYC}}}
        self.assertEqual(measure.begun_elsewhere(hosts, "a", EPYC, zen3), f"{EPYC} ({zen4})")
        self.assertIsNone(measure.begun_elsewhere(hosts, "a", EPYC, zen4))
        self.assertEqual(measure.begun_elsewhere(hosts, "a", EPYC, None), f"{EPYC} ({zen4})",
                         "this host's id unknown: not shown to be the first's")
        self.assertEqual(measure.begun_elsewhere(hosts, "a", EPYC, "family 25 model 17 stepping 2"),
                         f"{EPYC} ({zen4})", "a stepping apart is another kind")
        marked = {"s": {"cpu": EPYC, "cpu_id": "unrecorded (begun before 2026-12-05)",
                        "steps": {}}}
        for here_id in (zen4, None):
            self.assertIsNotNone(measure.begun_elsewhere(marked, "s", EPYC, here_id))
        self.assertIsNone(measure.begun_elsewhere(hosts, "old", EPYC, zen3),
                          "a case begun before ids were recorded: the name only")
        self.assertEqual(measure.begun_elsewhere(hosts, "a", XEON, zen4), EPYC)

    def test_the_first_step_fixes_the_id_and_an_old_case_gets_none_later(self):
        with tempfile.TemporaryDirectory() as d:
            old = measure.HOSTS
            measure.HOSTS = Path(d) / "hosts.json"
            try:
                measure.HOSTS.write_text(json.dumps(
                    {"old": {"cpu": EPYC, "steps": {"truth": EPYC}},
                     "by-hand": {"cpu": EPYC, "steps": {}}}))
                measure.record_host("by-hand", "one-core", EPYC, "family 25 model 17 stepping 1")
                measure.record_host("old", "quiet", EPYC, "family 25 model 17 stepping 1")
                measure.record_host("new", "truth", EPYC, "family 25 model 17 stepping 1")
                measure.record_host("new", "quiet", EPYC, "family 25 model 1 stepping 1")
                hosts = json.loads(measure.HOSTS.read_text())
            finally:
                measure.HOSTS = old
        self.assertNotIn("cpu_id", hosts["old"])
        self.assertNotIn("cpu_id", hosts["by-hand"], "an entry written by hand with no steps")
        self.assertEqual(hosts["old"]["step_ids"], {"quiet": "family 25 model 17 stepping 1"})
        self.assertEqual(hosts["new"]["cpu_id"], "family 25 model 17 stepping 1")
        self.assertEqual(hosts["new"]["step_ids"]["quiet"], "family 25 model 1 stepping 1")


class SittingEndedTest(unittest.TestCase):
    def test_a_fresh_clones_mtime_gives_way_to_the_commit_time(self):
        with tempfile.TemporaryDirectory() as d:
            git = ["git", "-C", d, "-c", "user.name=t", "-c", "user.email=t@t"]
            subprocess.run(["git", "init", "-q", d], check=True)
            f = Path(d) / "ground-truth.json"
            f.write_text("{}\n")
            subprocess.run(git + ["add", f.name], check=True)
            env = dict(os.environ, GIT_COMMITTER_DATE="2026-12-06T21:56:40Z")
            subprocess.run(git + ["commit", "-qm", "first sitting"], check=True, env=env)
            committed = 1796594200.0  # 2026-12-06T21:56:40Z
            os.utime(f, (committed + 36000, committed + 36000))  # as a checkout ten hours on
            self.assertEqual(measure.sitting_ended(f), committed)
            os.utime(f, (committed - 60, committed - 60))  # written before it was committed
            self.assertEqual(measure.sitting_ended(f), committed - 60)
            f.write_text("{ }\n")  # changed since: the commit says nothing of this version
            os.utime(f, (committed + 36000, committed + 36000))
            self.assertEqual(measure.sitting_ended(f), committed + 36000)

    def test_a_file_outside_git_keeps_its_mtime(self):
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "ground-truth.json"
            f.write_text("{}\n")
            self.assertEqual(measure.sitting_ended(f), f.stat().st_mtime)


if __name__ == "__main__":
    unittest.main()
