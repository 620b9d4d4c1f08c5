"""ps_server processes on 127.0.0.1 for the Python benchmarks and tests
(python/tests/conftest.py): the port each picks, its log, its resident
memory (from /proc); loopback ports free for other processes; and the
name=value figures a benchmark prints."""

import json
import os
import re
import socket
import subprocess
import time


def free_ports(n):
    """n loopback ports free now (the processes given them bind them a
    moment later)."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_server(bin_dir, workdir, flags=(), mode="async", index=0, num_ps=1, workers=1):
    """Starts bin_dir/ps_server/ps_server as ps `index` of `num_ps` for
    `workers` replicas, in `mode`, with `flags` (plaintext unless they hold
    the --tls_* flags), logging to
    workdir/ps<index>.log; returns (process, "127.0.0.1:port")."""
    log_path = os.path.join(workdir, "ps%d.log" % index)
    # Plaintext unless the flags give TLS.
    plaintext = [] if any(f.startswith("--tls_") for f in flags) else ["--insecure"]
    env = dict(
        os.environ,
        TF_CONFIG=json.dumps(
            {
                "cluster": {"ps": ["127.0.0.1:0"] * num_ps, "worker": ["127.0.0.1:0"] * workers},
                "task": {"type": "ps", "index": index},
            }
        ),
    )
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                os.path.join(bin_dir, "ps_server", "ps_server"),
                "--port=0",
                "--bind_host=127.0.0.1",
                "--mode=" + mode,
            ]
            + plaintext
            + list(flags),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(log_path) as f:
            match = re.search(r"listening on (\S+:\d+)", f.read())
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.02)  # the server writes its address to its log
    proc.kill()
    with open(log_path) as f:
        raise RuntimeError("ps %d did not start listening: %s" % (index, f.read()))


def status_kib(field, pid="self"):
    """A field of /proc/PID/status (VmRSS, VmHWM), in KiB."""
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/%s/status" % (field, pid))


def figures(output):
    """The name=value lines of a benchmark's output, as a dict of strings;
    its other lines (the client library's log) are skipped."""
    return dict(line.split("=", 1) for line in output.splitlines() if re.match(r"^\w+=\S*$", line))
