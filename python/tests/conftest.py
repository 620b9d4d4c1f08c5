"""Fixtures: real ps_server processes on 127.0.0.1, on ports they pick.

The Bazel target (python/tests/BUILD.bazel) sets FULCRUM_BIN_DIR to the
directory holding ps_server/ps_server, worker/worker and deploy/local_cluster,
and PYTHONPATH to the package under test.
"""
import json
import os
import re
import subprocess
import time

import pytest

BIN_DIR = os.environ.get("FULCRUM_BIN_DIR", "bazel-bin")
LISTENING = re.compile(r"listening on (\S+:\d+)")


def binary(path):
    full = os.path.join(BIN_DIR, path)
    if not os.path.exists(full):
        raise RuntimeError("%s is missing: build it, or set FULCRUM_BIN_DIR" % full)
    return full


class Servers:
    """`num_ps` servers in `mode` for `workers` replicas; stopped at teardown."""

    def __init__(self, tmp_path, mode, num_ps, workers, extra_flags):
        self.procs, self.addresses, self.logs = [], [], []
        placeholders = {"ps": ["127.0.0.1:0"] * num_ps, "worker": ["127.0.0.1:0"] * workers}
        for i in range(num_ps):
            log_path = tmp_path / ("ps%d.log" % i)
            env = dict(os.environ, TF_CONFIG=json.dumps(
                {"cluster": placeholders, "task": {"type": "ps", "index": i}}))
            log = open(log_path, "w")
            self.logs.append(log_path)
            self.procs.append(subprocess.Popen(
                [binary("ps_server/ps_server"), "--port=0", "--bind_host=127.0.0.1",
                 "--mode=" + mode] + list(extra_flags),
                stdout=log, stderr=subprocess.STDOUT, env=env))
            log.close()
            self.addresses.append(self._await_listening(i))

    def _await_listening(self, i, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = LISTENING.search(self.logs[i].read_text())
            if match:
                return match.group(1)
            if self.procs[i].poll() is not None:
                raise RuntimeError("ps %d exited: %s" % (i, self.logs[i].read_text()))
            time.sleep(0.02)  # the server writes its address to its log
        raise RuntimeError("ps %d did not start listening" % i)

    @property
    def hosts(self):
        return ",".join(self.addresses)

    def wait_exited(self, timeout=30.0):
        return [p.wait(timeout=timeout) for p in self.procs]

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


@pytest.fixture
def servers(tmp_path):
    """servers(mode="async", num_ps=2, workers=1, flags=()) -> Servers."""
    started = []

    def start(mode="async", num_ps=2, workers=1, flags=()):
        s = Servers(tmp_path, mode, num_ps, workers, flags)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
