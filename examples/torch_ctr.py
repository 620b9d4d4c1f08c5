#!/usr/bin/env python3
"""A DLRM-style click-through-rate model in PyTorch on Fulcrum's servers.

A bottom MLP over the numeric features, an embedding bag per categorical
field (fulcrum.torch.EmbeddingBagCollection: tables on the servers, keyed by
the raw ids, one row call per server per step for all fields), the pairwise
dot products of the bottom's output and the fields' rows (--interaction=cat:
the two side by side, as the C++ CTR model has them), and a top MLP to the
click's logit. The data is the C++ worker's: synthetic_ctr (generated,
with the test split's best possible AUC known) or labelled Criteo TSV files
(train.txt, test.txt in --data_dir). The chief reports the test AUC after
every epoch. Run it through the launcher:

  local_cluster --num_ps=2 --num_workers=3 --mode=async \\
      --worker_command="python3 examples/torch_ctr.py" -- --epochs=1
"""

import argparse
import json
import time

import numpy as np
import torch

import fulcrum
import fulcrum.cli
import fulcrum.torch


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])  # no ReLU on the last


class Dlrm(torch.nn.Module):
    """interaction "dot": DLRM's, the top MLP over the bottom's output and
    the pairwise dot products of it and the fields' rows; "cat": the top
    MLP over the bottom's output (the numeric features themselves without
    a bottom) and the rows side by side, as the C++ CTR model has it."""

    def __init__(self, num_numeric, num_fields, dim, bottom, top, tables, interaction="dot"):
        super().__init__()
        self.fields = ["field_%d" % i for i in range(num_fields)]
        self.interaction = interaction
        if interaction == "dot":
            bottom = [*bottom, dim]  # the dots need the rows' width
        self.bottom = (
            torch.nn.Sequential(mlp([num_numeric, *bottom]), torch.nn.ReLU())
            if bottom
            else torch.nn.Identity()
        )
        self.embeddings = fulcrum.torch.EmbeddingBagCollection(
            [fulcrum.torch.EmbeddingBagConfig(f, dim, **tables["config"]) for f in self.fields],
            optimizer=tables["optimizer"],
        )
        width = bottom[-1] if bottom else num_numeric
        if interaction == "dot":
            n = num_fields + 1
            pairs = torch.triu_indices(n, n, 1)
            self.pairs = pairs[0] * n + pairs[1]  # in the flattened [n, n] products
            self.top = mlp([width + len(self.pairs), *top, 1])
        else:
            self.top = mlp([width + num_fields * dim, *top, 1])

    def forward(self, numeric, ids):
        x = self.bottom(numeric)
        pooled = self.embeddings({f: ids[:, i : i + 1] for i, f in enumerate(self.fields)})
        rows = [pooled[f] for f in self.fields]
        if self.interaction == "cat":
            return self.top(torch.cat([x, *rows], 1)).squeeze(1)
        z = torch.stack([x, *rows], 1)  # [batch, fields + 1, dim]
        dots = torch.bmm(z, z.transpose(1, 2)).flatten(1).index_select(1, self.pairs)
        return self.top(torch.cat([x, dots], 1)).squeeze(1)


def auc(scores, labels):
    """The area under the ROC curve: the chance that a click outscores a
    non-click (ties count half)."""
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # ties share their mean rank
    ranks = first[inverse] + (counts[inverse] + 1) / 2.0
    positive = labels == 1
    n_pos, n_neg = positive.sum(), (~positive).sum()
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def evaluate(model, data):
    model.eval()
    with torch.no_grad():
        logits = torch.cat(
            [
                model(
                    torch.from_numpy(data.features[i : i + 4096]),
                    torch.from_numpy(data.ids[i : i + 4096]),
                )
                for i in range(0, len(data.labels), 4096)
            ]
        )
    model.train()
    labels = torch.from_numpy(data.labels.astype(np.float32))
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels).item()
    return auc(logits.numpy(), data.labels), loss


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    fulcrum.cli.add_flags(p)
    p.add_argument("--dataset", default="synthetic_ctr", help="synthetic_ctr or criteo.")
    p.add_argument("--data_dir", default="", help="criteo: holds train.txt and test.txt.")
    p.add_argument("--ctr_vocabulary", type=int, default=100000, help="synthetic_ctr: ids/field.")
    p.add_argument("--ctr_train_examples", type=int, default=600000, help="synthetic_ctr.")
    p.add_argument("--ctr_test_examples", type=int, default=20000, help="synthetic_ctr.")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=256, help="Examples per step per worker.")
    p.add_argument("--learning_rate", type=float, default=0.002, help="The MLPs' Adam.")
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--embedding_optimizer", default="adagrad", help="adagrad, adam, ftrl, sgd.")
    p.add_argument("--embedding_learning_rate", type=float, default=0.1)
    p.add_argument("--embedding_max_rows", type=int, default=0, help="Per server; 0: no bound.")
    p.add_argument("--embedding_admit_after", type=int, default=0)
    p.add_argument("--bottom", default="64", help="The bottom MLP's hidden sizes.")
    p.add_argument(
        "--interaction",
        default="dot",
        help="dot (DLRM's pairwise dot products) or cat (the rows side by side, as the C++ "
        "CTR model: with --bottom= it is that model).",
    )
    p.add_argument("--top", default="64,32", help="The top MLP's hidden sizes.")
    p.add_argument("--log_every_steps", type=int, default=200)
    args = fulcrum.cli.parse(p)
    if args.dataset not in ("synthetic_ctr", "criteo"):
        p.error("--dataset=%s: synthetic_ctr or criteo" % args.dataset)
    if args.interaction not in ("dot", "cat"):
        p.error("--interaction=%s: dot or cat" % args.interaction)
    optimizers = {"adagrad": fulcrum.adagrad, "adam": fulcrum.adam, "ftrl": fulcrum.ftrl}
    optimizers["sgd"] = fulcrum.sgd
    if args.embedding_optimizer not in optimizers:
        p.error(
            "--embedding_optimizer=%s: one of %s"
            % (args.embedding_optimizer, ", ".join(optimizers))
        )
    args.table_optimizer = optimizers[args.embedding_optimizer](args.embedding_learning_rate)
    return args


def sizes(text):
    return [int(s) for s in text.split(",") if s]


def main():
    args = parse_args()
    load = lambda split, **width: fulcrum.data.load(  # noqa: E731
        args.dataset,
        split,
        **width,
        data_dir=args.data_dir,
        ctr_vocabulary=args.ctr_vocabulary,
        ctr_train_examples=args.ctr_train_examples,
        ctr_test_examples=args.ctr_test_examples,
        seed=args.seed,
    )
    train = load("train")
    client = fulcrum.cli.connect(args)
    test = load("test", feature_dim=train.features.shape[1]) if client.is_chief else None
    role = "chief" if client.is_chief else "worker %d" % client.worker_id
    torch.manual_seed(args.seed)
    tables = {
        "optimizer": args.table_optimizer,
        "config": {"max_rows": args.embedding_max_rows, "admit_after": args.embedding_admit_after},
    }
    model = Dlrm(
        train.features.shape[1],
        train.ids.shape[1],
        args.embedding_dim,
        sizes(args.bottom),
        sizes(args.top),
        tables,
        args.interaction,
    )
    features, ids = torch.from_numpy(train.features), torch.from_numpy(train.ids)
    labels = torch.from_numpy(train.labels.astype(np.float32))
    with client:
        replica = fulcrum.torch.Replica(model, client, fulcrum.adam(args.learning_rate))
        checkpoints = fulcrum.cli.checkpoints(client, args)
        client.await_job_start()
        dealer = fulcrum.data.Dealer(
            client, len(labels), args.batch_size, epochs=args.epochs, seed=args.seed
        )
        print(
            "%s: %d workers, mode %s, %d fields, %d steps of %d per epoch"
            % (
                role,
                client.num_replicas,
                client.mode,
                train.ids.shape[1],
                dealer.steps_per_epoch,
                args.batch_size,
            ),
            flush=True,
        )
        start, examples, result = time.monotonic(), 0, None
        for batch in dealer:
            index = torch.from_numpy(batch.indices)
            model.zero_grad()
            logits = model(features[index], ids[index])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels[index])
            loss.backward()
            replica.step()
            examples += len(index)
            if checkpoints:
                checkpoints.maybe_save(client.step, {})
            if batch.step_in_epoch % args.log_every_steps == 0:
                print(
                    "%s: epoch %d step %d/%d loss %.4f"
                    % (
                        role,
                        batch.epoch + 1,
                        batch.step_in_epoch,
                        batch.steps_in_epoch,
                        loss.item(),
                    ),
                    flush=True,
                )
            if client.is_chief and batch.step_in_epoch + 1 == batch.steps_in_epoch:
                result = evaluate(model, test)
                print(
                    "chief: epoch %d test AUC %.4f (log loss %.4f)%s"
                    % (
                        batch.epoch + 1,
                        *result,
                        ", the data's best %.4f" % test.oracle_auc if test.oracle_auc >= 0 else "",
                    ),
                    flush=True,
                )
        wall = time.monotonic() - start
        client.finish()
        if client.is_chief:
            client.await_workers_finished()
            replica.pull()
            result = evaluate(model, test)
            rate = examples * client.num_replicas / wall
            print(
                "chief: final test AUC %.4f (log loss %.4f), %.0f examples/s" % (*result, rate),
                flush=True,
            )
            if checkpoints:
                checkpoints.save(client.step, {})
            if args.summary_json:
                with open(args.summary_json, "w") as f:
                    json.dump(
                        {
                            "test_auc": result[0],
                            "test_logloss": result[1],
                            "ground_truth_auc": test.oracle_auc,
                            "examples_per_sec": rate,
                            "epochs": args.epochs,
                            "global_steps": client.step,
                            "mode": client.mode,
                            "num_workers": client.num_replicas,
                            "num_ps": client.num_servers,
                            "wall_seconds": wall,
                            "batch_size": args.batch_size,
                            "model": "torch_dlrm",
                            "interaction": args.interaction,
                        },
                        f,
                        indent=2,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
