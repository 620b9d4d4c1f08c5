#!/usr/bin/env python3
"""The Python client against the C++ client, and fulcrum.torch against
PyTorch's DistributedDataParallel, each pair measured in the same run.

Against one ps_server on 127.0.0.1, bench:client_bench (C++) and this
process (Python) alternately time a 64 MiB push+pull and how far a 256 MiB
push+pull raises peak resident memory, then a 4 KiB pull in alternating
blocks of 50 pulls. Then
examples/torch_fashion_mnist.py runs through the launcher (2 servers, 3 sync
workers) and bench/torch_ddp_bench.py runs DDP over Gloo with 3 workers on
the same model, batch and data. Prints name=value lines; the headlines are
python_64MiB_vs_cpp (C++ time / Python time), python_4KiB_p50_overhead_us,
python_rss_growth_vs_cpp and fulcrum_torch_vs_ddp.

    PYTHONPATH=bazel-bin/python/site python3 bench/python_bench.py --bin_dir=bazel-bin
(bench/run.sh builds with -c opt and runs it.)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from local_server import figures, start_server, status_kib

import fulcrum

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def variable(name, floats):
    return fulcrum.variable(name, (floats // 1024, 1024), fulcrum.sgd(1e-6))


def python_figures(client, mib, rounds, rss_mib, first):
    big = mib << 18
    if first:
        specs = [variable("py_big", big)]
        if rss_mib:
            specs.append(variable("py_huge", rss_mib << 18))
        client.create_variables(specs)
    # First, in a heap that no large call has grown yet: what one push+pull
    # adds to the resident set, its tensors (written, so resident) aside.
    rss = {}
    if rss_mib:
        huge = rss_mib << 18
        huge_grads = {"py_huge": np.full((huge // 1024, 1024), 1e-3, np.float32)}
        huge_values = {"py_huge": np.full((huge // 1024, 1024), 0.0, np.float32)}
        before = status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to VmRSS
        client.push_pull(huge_grads, huge_values)
        rss["rss_mib"] = (status_kib("VmHWM") - before) / 1024.0
        del huge_grads, huge_values
    grads = {"py_big": np.full((big // 1024, 1024), 1e-3, np.float32)}
    values = client.pull(names=["py_big"])
    client.push_pull(grads, values)  # warm-up
    large = []
    for _ in range(rounds):
        start = time.perf_counter()
        client.push_pull(grads, values)
        large.append(time.perf_counter() - start)
    out = {"large_ms": 1e3 * statistics.median(large)}
    out.update(rss)
    return out


def cpp_figures(bin_dir, address, mib, rounds, rss_mib):
    done = subprocess.run(
        [
            os.path.join(bin_dir, "bench", "client_bench"),
            "--ps_hosts=" + address,
            "--mib=%d" % mib,
            "--rounds=%d" % rounds,
            "--small_rounds=0",
            "--rss_mib=%d" % rss_mib,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    values = figures(done.stdout)
    out = {"large_ms": float(values["cpp_push_pull_%dMiB_ms_p50" % mib])}
    if rss_mib:
        out["rss_mib"] = float(values["cpp_rss_growth_%dMiB_push_pull_MiB" % rss_mib])
    return out


def pin_threads(pid, cpus):
    """Every thread of process `pid` onto `cpus` (taskset -a)."""
    subprocess.run(
        ["taskset", "-a", "-cp", ",".join(map(str, sorted(cpus))), str(pid)],
        check=True,
        capture_output=True,
    )


def lockstep_4kib(bin_dir, address, blocks, block):
    """4 KiB pulls, Python's and C++'s, timed in alternating blocks: each
    side's p50 over all its pulls, and the median over the pairs of
    blocks of the difference of their p50s (Python's less C++'s).

    The two clients take turns every `block` pulls (a few ms), so the VM's
    slow phases, which last longer than that, fall on both blocks of a
    pair alike. Each client is new, so that neither carries what the
    large calls left in its connection.
    """
    client = fulcrum.connect(address)
    client.create_variables([variable("py_small", 1024)])
    cpp = subprocess.Popen(
        [
            os.path.join(bin_dir, "bench", "client_bench"),
            "--ps_hosts=" + address,
            "--lockstep",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        small = client.pull(names=["py_small"])
        latency, differences = [], []
        for _ in range(blocks):
            client.pull(small)  # as client_bench warms each block up
            own = []
            for _ in range(block):
                start = time.perf_counter()
                client.pull(small)
                own.append(time.perf_counter() - start)
            latency += own
            cpp.stdin.write("%d\n" % block)
            cpp.stdin.flush()
            answer = cpp.stdout.readline().split()
            if len(answer) != 2 or answer[0] != "done":
                raise RuntimeError("client_bench --lockstep stopped answering")
            differences.append(1e6 * statistics.median(own) - float(answer[1]))
        out, _ = cpp.communicate(timeout=60)
    finally:
        if cpp.poll() is None:
            cpp.kill()
            cpp.wait()
    if cpp.returncode != 0:
        raise RuntimeError("client_bench --lockstep exited with %d" % cpp.returncode)
    return (
        1e6 * statistics.median(latency),
        float(figures(out)["cpp_pull_4KiB_us_p50"]),
        statistics.median(differences),
    )


def torch_figures(bin_dir, train_examples, epochs, workdir):
    summary = os.path.join(workdir, "summary.json")
    common = [
        "--epochs=%d" % epochs,
        "--train_examples=%d" % train_examples,
        "--test_examples=1000",
    ]
    subprocess.run(
        [
            os.path.join(bin_dir, "deploy", "local_cluster"),
            "--num_ps=2",
            "--num_workers=3",
            "--mode=sync",
            "--insecure",  # plaintext, as DDP over Gloo is
            "--bin_dir=" + bin_dir,
            "--summary_json=" + summary,
            "--worker_command=%s %s"
            % (sys.executable, os.path.join(ROOT, "examples", "torch_fashion_mnist.py")),
            "--",
        ]
        + common,
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    )
    with open(summary) as f:
        result = json.load(f)
    ddp = subprocess.run(
        [sys.executable, os.path.join(HERE, "torch_ddp_bench.py"), "--workers=3"] + common,
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    )
    values = figures(ddp.stdout)
    return (
        result["examples_per_sec"],
        result["test_accuracy"],
        float(values["torch_ddp_gloo_examples_per_sec"]),
        float(values["torch_ddp_gloo_test_accuracy"]),
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin_dir", default=os.path.join(ROOT, "bazel-bin"))
    p.add_argument("--quick", action="store_true", help="Fewer rounds; the torch runs on 1/4.")
    args = p.parse_args()
    rounds, turns, blocks = (5, 3, 30) if args.quick else (10, 5, 100)
    mib, rss_mib = 64, 256
    workdir = tempfile.mkdtemp(prefix="python_bench.")
    server, address = start_server(
        args.bin_dir, workdir, ["--max_message_mb=1024", "--lease_timeout_ms=3600000"]
    )
    try:
        client = fulcrum.connect(address)
        # Alternately, `turns` times each: each side's best run stands for
        # it, the best of several runs finding each side's fast phase on a
        # shared VM.
        runs = {"cpp": [], "python": []}
        for i in range(turns):
            runs["cpp"].append(
                cpp_figures(args.bin_dir, address, mib, rounds, rss_mib if i == 0 else 0)
            )
            runs["python"].append(
                python_figures(client, mib, rounds, rss_mib if i == 0 else 0, first=i == 0)
            )
        # A 4 KiB round trip here moves by up to 100 µs between runs seconds
        # apart, far more than the overhead measured: the two clients take
        # turns every 50 pulls instead, both sampled over the same time.
        # With the server on one core and both clients on the other, where
        # there are two: where the scheduler puts them otherwise moves the
        # figure between runs.
        cpus = os.sched_getaffinity(0)
        if len(cpus) >= 2:
            pin_threads(server.pid, {min(cpus)})
            pin_threads(os.getpid(), {max(cpus)})  # client_bench inherits it
        try:
            small_us = {}
            small_us["python"], small_us["cpp"], overhead_us = lockstep_4kib(
                args.bin_dir, address, blocks, 50
            )
        finally:
            pin_threads(os.getpid(), cpus)
    finally:
        server.kill()
        server.wait()
    best = {
        side: {
            "large_ms": min(r["large_ms"] for r in rs),
            "rss_mib": rs[0]["rss_mib"],
        }
        for side, rs in runs.items()
    }
    for side in ("cpp", "python"):
        print("%s_push_pull_%dMiB_ms_p50=%.2f" % (side, mib, best[side]["large_ms"]))
        print(
            "%s_push_pull_%dMiB_MBps=%.1f"
            % (side, mib, 2 * mib * 1.048576 / best[side]["large_ms"] * 1e3)
        )
        print("%s_pull_4KiB_us_p50=%.1f" % (side, small_us[side]))
        print("%s_rss_growth_%dMiB_push_pull_MiB=%.1f" % (side, rss_mib, best[side]["rss_mib"]))
    print("python_64MiB_vs_cpp=%.3f" % (best["cpp"]["large_ms"] / best["python"]["large_ms"]))
    print("python_4KiB_p50_overhead_us=%.1f" % overhead_us)
    print("python_rss_growth_vs_cpp=%.3f" % (best["python"]["rss_mib"] / best["cpp"]["rss_mib"]))
    print("python_rss_growth_vs_tensor=%.3f" % (best["python"]["rss_mib"] / rss_mib))
    sys.stdout.flush()

    examples = 15000 if args.quick else 60000
    fulcrum_rate, fulcrum_acc, ddp_rate, ddp_acc = torch_figures(args.bin_dir, examples, 1, workdir)
    print("fulcrum_torch_sync_3workers_examples_per_sec=%.1f" % fulcrum_rate)
    print("fulcrum_torch_test_accuracy_1epoch=%.4f" % fulcrum_acc)
    print("torch_ddp_gloo_3workers_examples_per_sec=%.1f" % ddp_rate)
    print("torch_ddp_gloo_test_accuracy_1epoch=%.4f" % ddp_acc)
    print("fulcrum_torch_vs_ddp=%.3f" % (fulcrum_rate / ddp_rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
