#!/usr/bin/env python3
"""PyTorch's own DistributedDataParallel over Gloo, on the model, batch, data
share and thread count of examples/torch_fashion_mnist.py: the baseline of
bench/python_bench.py's fulcrum_torch_vs_ddp. Starts --workers processes on
127.0.0.1 and prints torch_ddp_gloo_examples_per_sec (rank 0's count times
the workers, over the timed epochs) and the test accuracy.

    python3 bench/torch_ddp_bench.py --workers=3 --epochs=1
"""

import argparse
import os
import socket
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from torch_fashion_mnist import Net, evaluate, load  # noqa: E402  (the same model and data)


def worker(args):
    torch.set_num_threads(args.cpu_threads)
    dist.init_process_group(
        "gloo",
        init_method="tcp://127.0.0.1:%d" % args.port,
        rank=args.rank,
        world_size=args.workers,
    )
    train_x, train_y = load(args.data_dir, "train", args.train_examples)
    torch.manual_seed(args.seed)
    model = torch.nn.parallel.DistributedDataParallel(Net())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    steps = len(train_x) // args.workers // args.batch_size
    start = time.monotonic()
    for epoch in range(1, args.epochs + 1):
        order = torch.from_numpy(np.random.default_rng(args.seed + epoch).permutation(len(train_x)))
        mine = order[args.rank :: args.workers]
        for step in range(steps):
            index = mine[step * args.batch_size : (step + 1) * args.batch_size]
            optimizer.zero_grad()
            F.cross_entropy(model(train_x[index]), train_y[index]).backward()
            optimizer.step()
    wall = time.monotonic() - start
    if args.rank == 0:
        test_x, test_y = load(args.data_dir, "test", args.test_examples)
        _, accuracy = evaluate(model.module, test_x, test_y)
        print(
            "torch_ddp_gloo_examples_per_sec=%.1f"
            % (steps * args.batch_size * args.workers * args.epochs / wall)
        )
        print("torch_ddp_gloo_test_accuracy=%.4f" % accuracy, flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train_examples", type=int, default=0)
    p.add_argument("--test_examples", type=int, default=1000)
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument(
        "--cpu_threads",
        type=int,
        default=0,
        help="Per worker; 0: cores / workers, as the launcher gives its workers.",
    )
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.cpu_threads <= 0:
        args.cpu_threads = max(1, (os.cpu_count() or 1) // args.workers)
    if args.rank >= 0:
        worker(args)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [a for a in sys.argv[1:]]
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)]
            + argv
            + ["--rank=%d" % r, "--port=%d" % port]
        )
        for r in range(args.workers)
    ]
    codes = [proc.wait(timeout=3600) for proc in procs]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
