#!/usr/bin/env python3
"""A PyTorch CNN trained on Fashion-MNIST through Fulcrum's parameter servers.

Each worker trains its share of the training set with fulcrum.torch.Replica:
the servers hold the model and apply Adam; the chief (worker 0) evaluates on
the test set after every epoch and writes the run's summary. Run it through
the launcher, which gives every worker its TF_CONFIG:

  local_cluster --num_ps=2 --num_workers=3 --mode=sync \\
      --worker_command="python3 examples/torch_fashion_mnist.py" -- --epochs=10

It takes the C++ worker's flags that apply to it (the launcher passes some of
them); --summary_json gets the same keys as the C++ chief's.
"""

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import fulcrum
import fulcrum.cli
import fulcrum.torch

MEAN, STDDEV = 0.2860, 0.3530  # of Fashion-MNIST's training pixels


class Net(torch.nn.Module):
    """Two conv layers with pooling, two dense layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def read_idx(path):
    """An IDX file (gzip): uint8 images (n, 1, rows, cols) or labels (n,)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(magic & 0xFF)]
    body = np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims))
    if body.size != int(np.prod(dims)):
        raise ValueError("%s: %d bytes of data for dimensions %s" % (path, body.size, dims))
    return body.reshape(dims[0], 1, *dims[1:]) if len(dims) == 3 else body


def load(data_dir, split, limit):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STDDEV
    return x, torch.from_numpy(labels.astype(np.int64))


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x[i : i + 1000]) for i in range(0, len(x), 1000)])
    model.train()
    return (F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item())


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fulcrum.cli.add_flags(p)  # --mode, TLS, tokens, checkpoints: the launcher's
    p.add_argument("--epochs", type=int, default=10, help="Passes over this worker's share.")
    p.add_argument("--batch_size", type=int, default=64, help="Examples per step per worker.")
    p.add_argument("--learning_rate", type=float, default=1e-3, help="Adam's, on the servers.")
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--train_examples", type=int, default=0, help="Use the first N (0: all).")
    p.add_argument("--test_examples", type=int, default=0, help="Use the first N (0: all).")
    args = fulcrum.cli.parse(p)
    if args.epochs < 1 or args.batch_size < 1:
        p.error("--epochs and --batch_size must be at least 1")
    return args


def main():
    args = parse_args()
    train_x, train_y = load(args.data_dir, "train", args.train_examples)
    test_x, test_y = load(args.data_dir, "test", args.test_examples)
    client = fulcrum.cli.connect(args)
    rank, replicas = client.worker_id, client.num_replicas
    role = "chief" if client.is_chief else "worker %d" % rank
    torch.manual_seed(args.seed)
    model = Net()
    metrics = open(args.metrics_jsonl, "w") if client.is_chief and args.metrics_jsonl else None
    with client:
        replica = fulcrum.torch.Replica(
            model, client, fulcrum.adam(args.learning_rate, learning_rate_scaling="SQRT")
        )
        checkpoints = fulcrum.cli.checkpoints(client, args)
        if checkpoints:

            def state():
                return {"rng": torch.get_rng_state(), **replica.local_state()}

            restored = checkpoints.restored()
            if restored:  # the servers restored a checkpoint: so does the chief
                torch.set_rng_state(restored["rng"])
                replica.load_local_state(restored)
                print("chief: restored its state from the checkpoint at step %d" % client.step)
        client.await_job_start()
        # This worker's share of each epoch, dealt as the C++ worker deals:
        # every worker takes the same number of steps (sync steps need them
        # all), a worker gone for good has its share dealt over the others,
        # and a restarted one resumes at the servers' step.
        dealer = fulcrum.data.Dealer(
            client, len(train_x), args.batch_size, epochs=args.epochs, seed=args.seed
        )
        start, examples, loss_sum = time.monotonic(), 0, 0.0
        print(
            "%s: %d workers, mode %s, %d steps of %d per epoch%s"
            % (
                role,
                replicas,
                client.mode,
                dealer.steps_per_epoch,
                args.batch_size,
                ", resuming after %d" % dealer.resumed if dealer.resumed else "",
            ),
            flush=True,
        )
        for batch in dealer:
            index = torch.from_numpy(batch.indices)
            model.zero_grad()
            loss = F.cross_entropy(model(train_x[index]), train_y[index])
            loss.backward()
            replica.step()
            if checkpoints:
                checkpoints.maybe_save(client.step, state)
            loss_sum += loss.item()
            examples += len(index)
            if batch.step_in_epoch + 1 < batch.steps_in_epoch:
                continue
            epoch = batch.epoch + 1
            rate = examples * replicas / (time.monotonic() - start)
            line = "%s: epoch %d/%d train loss %.4f, %.0f examples/s" % (
                role,
                epoch,
                args.epochs,
                loss_sum / batch.steps_in_epoch,
                rate,
            )
            loss_sum = 0.0
            if client.is_chief:
                epoch_result = evaluate(model, test_x, test_y)
                line += ", test loss %.4f accuracy %.4f" % epoch_result
                if metrics:
                    metrics.write(
                        json.dumps(
                            {
                                "epoch": epoch,
                                "test_loss": epoch_result[0],
                                "test_accuracy": epoch_result[1],
                                "examples_per_sec": rate,
                            }
                        )
                        + "\n"
                    )
                    metrics.flush()
            print(line, flush=True)
        wall = time.monotonic() - start
        client.finish()
        if client.is_chief:
            # The final values: after every worker's last push.
            client.await_workers_finished()
            replica.pull()
            test_loss, test_accuracy = evaluate(model, test_x, test_y)
            print(
                "chief: final test accuracy %.4f (loss %.4f) in %.1f s"
                % (test_accuracy, test_loss, wall),
                flush=True,
            )
            if checkpoints:  # the job's last state: what was evaluated, for export
                checkpoints.save(client.step, state())
            if args.summary_json:
                with open(args.summary_json, "w") as f:
                    json.dump(
                        {
                            "test_accuracy": test_accuracy,
                            "test_loss": test_loss,
                            "epochs": args.epochs,
                            "global_steps": client.step,
                            "examples_per_sec": examples * replicas / wall,
                            "mode": client.mode,
                            "num_workers": replicas,
                            "num_ps": client.num_servers,
                            "wall_seconds": wall,
                            "batch_size": args.batch_size,
                            "model": "torch_cnn",
                            "device": "cpu",
                        },
                        f,
                        indent=2,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
