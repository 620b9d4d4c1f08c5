"""Fixtures: real ps_server processes on 127.0.0.1, on ports they pick.

The Bazel target (python/tests/BUILD.bazel) sets FULCRUM_BIN_DIR to the
directory holding ps_server/ps_server and deploy/local_cluster, and
PYTHONPATH to the package under test and bench/ (for local_server.py, which
starts the servers).
"""

import os
import subprocess
import sys

import pytest
from local_server import start_server  # bench/local_server.py

BIN_DIR = os.environ.get("FULCRUM_BIN_DIR", "bazel-bin")


SOURCE = os.environ.get("FULCRUM_SOURCE_DIR", ".")


def example(name):
    return os.path.join(SOURCE, "examples", name)


def launcher_env(**extra):
    """The environment of a launcher run: the test's, without its
    PYTHONPATH (the launcher gives its workers the package itself)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


def launcher_argv(program, summary, *flags):
    """local_cluster running examples/`program`, with this test's Python,
    as every worker, the chief writing its summary to `summary`; `flags`
    go to the launcher (those after "--" to the program)."""
    return [
        binary("deploy/local_cluster"),
        "--bin_dir=" + BIN_DIR,
        "--worker_command=%s %s" % (sys.executable, example(program)),
        "--summary_json=%s" % summary,
        *flags,
    ]


def launch(program, summary, *flags):
    """launcher_argv run to its end, within 10 minutes."""
    return subprocess.run(
        launcher_argv(program, summary, *flags),
        capture_output=True,
        text=True,
        timeout=600,
        env=launcher_env(),
    )


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
