"""A PyTorch job survives what a C++ job survives: a server killed and
restarted by the launcher, a server lost for good with replicated shards,
the chief killed and restarted, and a worker killed for good in sync mode,
whose share of the data is then re-dealt."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from conftest import BIN_DIR, binary
from local_server import start_server

EXAMPLE = os.path.join(
    os.environ.get("FULCRUM_SOURCE_DIR", "."), "examples", "torch_fashion_mnist.py"
)
SMALL = ["--train_examples=6000", "--test_examples=1000", "--batch_size=64"]


class Running:
    """A process whose output lines are collected as they come."""

    def __init__(self, argv, env=None):
        self.lines = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, pattern, timeout=180):
        """The first match of `pattern` in a line, awaited."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        with self._changed:
            while True:
                for line in self.lines:
                    match = regex.search(line)
                    if match:
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError("no line matches %r:\n%s" % (pattern, self.text()[-4000:]))
                self._changed.wait(min(left, 1.0))

    def text(self):
        with self._changed:
            return "\n".join(self.lines)

    def wait(self, timeout=300):
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=10)
        return code


def launch(tmp_path, *flags, worker_flags=()):
    return Running(
        [
            binary("deploy/local_cluster"),
            "--bin_dir=" + BIN_DIR,
            "--worker_command=%s %s" % (sys.executable, EXAMPLE),
            "--summary_json=%s" % (tmp_path / "summary.json"),
            *flags,
            "--",
            *SMALL,
            *worker_flags,
        ]
    )


def kill_when(cluster, started, ready):
    """Kills (-9) the process whose start the launcher printed as `started`
    (a pattern with its pid) once a line matches `ready`; then awaits the
    whole run, which must succeed."""
    pid = int(cluster.wait_for(started).group(1))
    try:
        cluster.wait_for(ready)
        os.kill(pid, signal.SIGKILL)
        assert cluster.wait() == 0, cluster.text()[-4000:]
    finally:
        cluster.proc.kill()
    return cluster.text()


def accuracy(tmp_path):
    return json.loads((tmp_path / "summary.json").read_text())["test_accuracy"]


def test_a_killed_server_is_restarted_restores_and_the_job_completes(tmp_path):
    cluster = launch(
        tmp_path,
        "--num_ps=2",
        "--num_workers=2",
        "--mode=sync",
        "--checkpoint_dir=%s" % (tmp_path / "ckpt"),
        "--max_restarts=2",
        "--ps_args=--lease_timeout_ms=5000",
        worker_flags=["--epochs=3", "--checkpoint_every_steps=20"],
    )
    text = kill_when(  # once there is a checkpoint to restore
        cluster, r"\[launcher\] started ps 1 \(pid (\d+)\)", r"checkpoint ckpt-\d+ complete"
    )
    assert "[launcher] restarting ps 1 (restart 1 of 2)" in text
    assert "restoring from checkpoint" in text
    assert "restarted: its" in text  # the workers gave it their variables again
    assert accuracy(tmp_path) > 0.7


def test_a_server_lost_for_good_fails_over_to_its_backups(tmp_path):
    """--replication=2: a server killed for good (never restarted) has its
    shards' backups promoted; the PyTorch job follows the new primaries and
    completes, with no process restarted."""
    cluster = launch(
        tmp_path,
        "--num_ps=3",
        "--num_workers=2",
        "--mode=sync",
        "--replication=2",
        worker_flags=["--epochs=3"],
    )
    text = kill_when(
        cluster, r"\[launcher\] started ps 1 \(pid (\d+)\)", r"\[worker 0\] chief: epoch 1/3"
    )
    assert "lost its lease in etcd: its shards fail over" in text
    assert "[launcher] restarting" not in text
    assert "chief: epoch 3/3" in text
    assert accuracy(tmp_path) > 0.7


def test_a_killed_chief_is_restarted_and_resumes(tmp_path):
    cluster = launch(
        tmp_path,
        "--num_ps=2",
        "--num_workers=2",
        "--mode=sync",
        "--max_restarts=1",
        "--ps_args=--lease_timeout_ms=3000",
        worker_flags=["--epochs=3"],
    )
    text = kill_when(
        cluster, r"\[launcher\] started worker 0 \(pid (\d+)\)", r"\[worker 0\] chief: epoch 1/3"
    )
    assert "[launcher] restarting worker 0 (restart 1 of 1)" in text
    assert re.search(r"\[worker 0\] chief: .*resuming after \d+", text), text[-4000:]
    assert "chief: epoch 3/3" in text
    assert accuracy(tmp_path) > 0.7


def test_a_worker_killed_for_good_has_its_share_dealt_over_the_others(tmp_path):
    num_ps, workers = 2, 3
    servers = [
        start_server(
            BIN_DIR,
            str(tmp_path),
            ["--lease_timeout_ms=2000"],
            mode="sync",
            index=i,
            num_ps=num_ps,
            workers=workers,
        )
        for i in range(num_ps)
    ]
    hosts = [address for _, address in servers]
    running = []
    try:
        for w in range(workers):
            tf_config = {
                "cluster": {"ps": hosts, "worker": ["127.0.0.1:0"] * workers},
                "task": {"type": "worker", "index": w},
            }
            argv = [sys.executable, EXAMPLE, "--insecure", "--mode=sync", "--epochs=3", *SMALL]
            if w == 0:
                argv.append("--summary_json=%s" % (tmp_path / "summary.json"))
            running.append(Running(argv, env=dict(os.environ, TF_CONFIG=json.dumps(tf_config))))
        # Killed as it starts: until its lease runs out the others' sync steps
        # wait for it, so the first epoch ends after the servers know it dead.
        running[2].wait_for(r"worker 2: 3 workers, mode sync")
        running[2].proc.send_signal(signal.SIGKILL)
        running[2].wait()
        for w in (0, 1):
            assert running[w].wait() == 0, running[w].text()[-4000:]
            assert "worker(s) 2 gone for good" in running[w].text()
        summary = json.loads((tmp_path / "summary.json").read_text())
        # Epoch 1 over three workers, the two others over two: every example seen.
        assert summary["global_steps"] == 6000 // 3 // 64 + 2 * (6000 // 2 // 64)
        assert summary["test_accuracy"] > 0.7
    finally:
        for r in running:
            if r.proc.poll() is None:
                r.proc.kill()
        for proc, _ in servers:
            proc.kill()
            proc.wait()
