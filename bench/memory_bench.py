#!/usr/bin/env python3
"""Resident memory of a server and a client during 64 MiB push+pulls,
against the state each must hold: the server's values and Adam's two slots
(server_rss_vs_state, target <= 1.3), the client's model
(worker_rss_vs_model; it holds the pulled values and the gradients, so 2 is
its floor). bench:client_bench makes the calls against a ps_server process;
both peaks are read from /proc (VmHWM).

    python3 bench/memory_bench.py --bin_dir=bazel-bin
"""
import argparse
import os
import subprocess
import sys
import tempfile

from local_server import start_server, status_kib

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin_dir", default=os.path.join(os.path.dirname(HERE), "bazel-bin"))
    p.add_argument("--mib", type=int, default=64, help="The model's size.")
    p.add_argument("--rounds", type=int, default=20, help="Push+pulls.")
    args = p.parse_args()
    server, address = start_server(args.bin_dir, tempfile.mkdtemp(prefix="memory_bench."),
                                   ["--lease_timeout_ms=3600000"])
    try:
        idle_mib = status_kib("VmRSS", server.pid) / 1024.0
        done = subprocess.run(
            [os.path.join(args.bin_dir, "bench", "client_bench"), "--ps_hosts=" + address,
             "--mib=%d" % args.mib, "--rounds=%d" % args.rounds, "--small_rounds=10",
             "--rss_mib=0", "--optimizer=adam"],
            capture_output=True, text=True, timeout=1800, check=True)
        server_mib = status_kib("VmHWM", server.pid) / 1024.0
    finally:
        server.kill()
        server.wait()
    client = dict(line.split("=", 1) for line in done.stdout.split())
    client_mib = float(client["cpp_client_peak_rss_MiB"])
    state_mib = 3 * args.mib  # values, Adam's m and v (the 4 KiB variable aside)
    print("server_idle_rss_MiB=%.1f" % idle_mib)
    print("server_peak_rss_%dMiB_adam_MiB=%.1f" % (args.mib, server_mib))
    print("server_state_MiB=%d" % state_mib)
    print("server_rss_vs_state=%.2f" % (server_mib / state_mib))
    print("worker_peak_rss_%dMiB_MiB=%.1f" % (args.mib, client_mib))
    print("worker_rss_vs_model=%.2f" % (client_mib / args.mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
