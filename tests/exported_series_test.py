#!/usr/bin/env python3
"""The Grafana dashboard (deploy/grafana/fulcrum.json) and the alerting rules
(deploy/prometheus/fulcrum-alerts.yml) name only series the daemons really
export: a ps_server and a worker training the CTR model (so the servers hold
embedding tables) are started on 127.0.0.1 with --metrics_port, both are
scraped mid-run, and every fulcrum_* name in a panel's query or a rule's
expression must be one of the scrapes' families (a histogram's _bucket,
_sum and _count included)."""

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request


def runfile(path):
    root = os.environ.get("TEST_SRCDIR", ".")
    candidate = os.path.join(root, os.environ.get("TEST_WORKSPACE", ""), path)
    return candidate if os.path.exists(candidate) else path


class Daemon:
    """A child process whose output lines are read on a thread and kept."""

    def __init__(self, argv):
        self.lines = []
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            sys.stderr.write(line)
            self.lines.append(line)

    def await_match(self, pattern, timeout=60):
        """The first match of `pattern` in a line, waiting up to `timeout` s."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in list(self.lines):
                match = re.search(pattern, line)
                if match:
                    return match
            if self.process.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} from {self.process.args[0]}")

    def stop(self):
        self.process.kill()
        self.process.wait()


def families(port):
    """The metric names the endpoint on 127.0.0.1:`port` exports."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names.add(name)
        if kind == "histogram":
            names.update({name + "_bucket", name + "_sum", name + "_count"})
    return names


def named(text):
    return set(re.findall(r"\bfulcrum_[a-z0-9_]+\b", text))


def main():
    ps = Daemon(
        [
            runfile("ps_server/ps_server"),
            "--ps_hosts=127.0.0.1:0",
            "--worker_hosts=127.0.0.1:1",
            "--task_index=0",
            "--port=0",
            "--bind_host=127.0.0.1",
            "--mode=async",
            "--insecure",
            "--metrics_port=0",
        ]
    )
    worker = None
    try:
        ps_metrics = int(ps.await_match(r"metrics on http://[\d.]+:(\d+)").group(1))
        ps_port = int(ps.await_match(r"listening on 127\.0\.0\.1:(\d+)").group(1))
        worker = Daemon(
            [
                runfile("worker/worker"),
                f"--ps_hosts=127.0.0.1:{ps_port}",
                "--worker_hosts=127.0.0.1:1",
                "--task_index=0",
                "--mode=async",
                "--insecure",
                "--model=ctr",
                "--dataset=synthetic_ctr",
                "--ctr_vocabulary=1000",
                "--ctr_train_examples=20000",
                "--ctr_test_examples=1000",
                "--epochs=1000",
                "--embedding_max_rows=100",
                "--log_every_steps=20",
                "--device=cpu",
                "--metrics_port=0",
                "--metrics_host=127.0.0.1",
            ]
        )
        worker_metrics = int(worker.await_match(r"metrics on http://[\d.]+:(\d+)").group(1))
        worker.await_match(r"step 40/", timeout=120)
        exported = families(ps_metrics) | families(worker_metrics)
    finally:
        for daemon in (worker, ps):
            if daemon is not None:
                daemon.stop()

    with open(runfile("deploy/grafana/fulcrum.json")) as f:
        dashboard = json.load(f)
    used = {}
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in named(target["expr"]):
                used.setdefault(name, []).append(f"dashboard panel '{panel['title']}'")
    for name in named(dashboard["templating"]["list"][1]["query"]):
        used.setdefault(name, []).append("dashboard variable 'job'")
    with open(runfile("deploy/prometheus/fulcrum-alerts.yml")) as f:
        for alert, expr in re.findall(
            r"- alert: (\w+)\n(?:.*\n)*?\s+expr: (.*(?:\n {10,}.*)*)", f.read()
        ):
            for name in named(expr):
                used.setdefault(name, []).append(f"alert {alert}")
    missing = {name: where for name, where in used.items() if name not in exported}
    for name, where in sorted(missing.items()):
        print(f"{name}: named by {', '.join(where)}, exported by no daemon")
    if len(used) < 15:
        print(f"only {len(used)} series named: the queries were not read")
        return 1
    print(f"{len(used)} series named by the dashboard and the rules, all exported")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
