"""A ps_server process on 127.0.0.1 for the Python benchmarks: the port it
picks, its log, and its resident memory (from /proc)."""
import json
import os
import re
import subprocess
import time


def start_server(bin_dir, workdir, flags=()):
    """Starts bin_dir/ps_server/ps_server (async, one worker, a lease of an
    hour) with `flags`; returns (process, "127.0.0.1:port")."""
    log_path = os.path.join(workdir, "ps.log")
    env = dict(os.environ, TF_CONFIG=json.dumps({
        "cluster": {"ps": ["127.0.0.1:0"], "worker": ["127.0.0.1:0"]},
        "task": {"type": "ps", "index": 0}}))
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [os.path.join(bin_dir, "ps_server", "ps_server"), "--port=0", "--bind_host=127.0.0.1",
             "--mode=async", "--lease_timeout_ms=3600000"] + list(flags),
            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(log_path) as f:
            match = re.search(r"listening on (\S+:\d+)", f.read())
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)  # the server writes its address to its log
    proc.kill()
    raise RuntimeError("ps_server did not start: see " + log_path)


def status_kib(field, pid="self"):
    """A field of /proc/PID/status (VmRSS, VmHWM), in KiB."""
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/%s/status" % (field, pid))
