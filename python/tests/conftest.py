"""Fixtures: real ps_server processes on 127.0.0.1, on ports they pick.

The Bazel target (python/tests/BUILD.bazel) sets FULCRUM_BIN_DIR to the
directory holding ps_server/ps_server and deploy/local_cluster, and
PYTHONPATH to the package under test and bench/ (for local_server.py, which
starts the servers).
"""

import os

import pytest
from local_server import start_server  # bench/local_server.py

BIN_DIR = os.environ.get("FULCRUM_BIN_DIR", "bazel-bin")


def binary(path):
    full = os.path.join(BIN_DIR, path)
    if not os.path.exists(full):
        raise RuntimeError("%s is missing: build it, or set FULCRUM_BIN_DIR" % full)
    return full


class Servers:
    """`num_ps` servers in `mode` for `workers` replicas; stopped at teardown."""

    def __init__(self, tmp_path, mode, num_ps, workers, extra_flags):
        self.procs, self.addresses = [], []
        for i in range(num_ps):
            proc, address = start_server(
                BIN_DIR,
                str(tmp_path),
                extra_flags,
                mode=mode,
                index=i,
                num_ps=num_ps,
                workers=workers,
            )
            self.procs.append(proc)
            self.addresses.append(address)

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
