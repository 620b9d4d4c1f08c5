#!/usr/bin/env python3
"""Resident memory of a server and a client during 64 MiB push+pulls,
against the state each must hold: the server's values and Adam's two slots
(target <= 1.3), the client's model (worker_rss_vs_model; it holds the
pulled values and the gradients, so 2 is its floor). The variable is one
shard (server_rss_vs_state_1shard: the server holds a whole shard's
gradient while it arrives), then split into 4 MiB shards by the MAX_SIZE
partitioner, as large variables should be (server_rss_vs_state: each shard
is applied as soon as it is in). bench:client_bench makes the calls
against a fresh ps_server process each time; peaks are read from /proc
(VmHWM).

    python3 bench/memory_bench.py --bin_dir=bazel-bin
"""

import argparse
import os
import subprocess
import sys
import tempfile

from local_server import figures, start_server, status_kib

HERE = os.path.dirname(os.path.abspath(__file__))


def measure(args, max_shard_mib):
    """Peak resident MiB of a fresh server and of the client over
    args.rounds push+pulls of a variable in shards of at most max_shard_mib
    (0: one shard), and the server's before them."""
    server, address = start_server(
        args.bin_dir, tempfile.mkdtemp(prefix="memory_bench."), ["--lease_timeout_ms=3600000"]
    )
    try:
        idle_mib = status_kib("VmRSS", server.pid) / 1024.0
        done = subprocess.run(
            [
                os.path.join(args.bin_dir, "bench", "client_bench"),
                "--ps_hosts=" + address,
                "--mib=%d" % args.mib,
                "--rounds=%d" % args.rounds,
                "--small_rounds=10",
                "--rss_mib=0",
                "--optimizer=adam",
                "--max_shard_mib=%d" % max_shard_mib,
            ],
            capture_output=True,
            text=True,
            timeout=1800,
            check=True,
        )
        server_mib = status_kib("VmHWM", server.pid) / 1024.0
    finally:
        server.kill()
        server.wait()
    client = figures(done.stdout)
    return idle_mib, server_mib, float(client["cpp_client_peak_rss_MiB"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin_dir", default=os.path.join(os.path.dirname(HERE), "bazel-bin"))
    p.add_argument("--mib", type=int, default=64, help="The model's size.")
    p.add_argument("--rounds", type=int, default=20, help="Push+pulls.")
    p.add_argument(
        "--max_shard_mib",
        type=int,
        default=4,
        help="The split variable's shards: at most this many MiB (MAX_SIZE).",
    )
    args = p.parse_args()
    state_mib = 3 * args.mib  # values, Adam's m and v (the 4 KiB variable aside)
    idle_mib, whole_mib, client_mib = measure(args, 0)
    _, split_mib, _ = measure(args, args.max_shard_mib)
    print("server_idle_rss_MiB=%.1f" % idle_mib)
    print("server_state_MiB=%d" % state_mib)
    print("server_peak_rss_%dMiB_adam_1shard_MiB=%.1f" % (args.mib, whole_mib))
    print("server_rss_vs_state_1shard=%.2f" % (whole_mib / state_mib))
    print(
        "server_peak_rss_%dMiB_adam_%dMiB_shards_MiB=%.1f"
        % (args.mib, args.max_shard_mib, split_mib)
    )
    print("server_rss_vs_state=%.2f" % (split_mib / state_mib))
    print("worker_peak_rss_%dMiB_MiB=%.1f" % (args.mib, client_mib))
    print("worker_rss_vs_model=%.2f" % (client_mib / args.mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
