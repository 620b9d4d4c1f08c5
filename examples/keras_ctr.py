#!/usr/bin/env python3
"""A Keras click-through-rate model on Fulcrum: categorical fields in
fulcrum.tensorflow.Embedding tables, trained with Model.fit.

The 26 categorical fields' ids (63-bit keys, each field's its own) go into
one table on the servers, keyed by the ids themselves (no vocabulary, no
hashing), whose rows sparse Adagrad updates there; the rows, side by side with the 13
numeric features, feed an MLP (64-32) to the click's logit, which Adam
trains: the C++ CTR model's architecture and hyperparameters. The
data is the C++ worker's synthetic_ctr, whose test split's best possible
AUC is known: the chief prints its AUC against it. Run it through the
launcher:

  local_cluster --num_ps=2 --num_workers=3 --mode=async \\
      --worker_command="python3 examples/keras_ctr.py" -- --epochs=1
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf

import fulcrum
import fulcrum.data
import fulcrum.tensorflow

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=256)
parser.add_argument("--dim", type=int, default=16, help="Each field's row width.")
parser.add_argument("--train_examples", type=int, default=2000000)
parser.add_argument("--test_examples", type=int, default=100000)
parser.add_argument("--vocabulary", type=int, default=1000000, help="Ids per field.")
parser.add_argument(
    "--admit_after", type=int, default=4, help="Store an id at its N-th push (the table's)."
)
args, _ = parser.parse_known_args()  # the launcher's flags are not this program's

strategy = fulcrum.tensorflow.ParameterServerStrategy()
train, test = (
    fulcrum.data.load(
        "synthetic_ctr",
        split,
        ctr_vocabulary=args.vocabulary,
        ctr_train_examples=args.train_examples,
        ctr_test_examples=args.test_examples,
    )
    for split in ("train", "test")
)
fields = train.ids.shape[1]


with strategy.scope():
    numeric = tf.keras.Input((train.features.shape[1],), name="numeric")
    ids = tf.keras.Input((fields,), dtype="int64", name="ids")
    rows = fulcrum.tensorflow.Embedding(args.dim, table="fields", optimizer=fulcrum.adagrad(0.05))(
        ids
    )
    x = tf.keras.layers.Concatenate()([numeric, tf.keras.layers.Flatten()(rows)])
    x = tf.keras.layers.Dense(64, activation="relu")(x)
    logit = tf.keras.layers.Dense(1)(x)
    model = tf.keras.Model([numeric, ids], logit)
    model.compile(
        optimizer=tf.keras.optimizers.Adam(0.002),
        loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.AUC(from_logits=True, name="auc")],
    )

train_dataset = tf.data.Dataset.from_tensor_slices(
    ((train.features, train.ids), train.labels.astype(np.float32))
).batch(args.batch_size)
throughput = fulcrum.tensorflow.Throughput(args.batch_size, strategy.num_workers)
model.fit(train_dataset, epochs=args.epochs, verbose=2, callbacks=[throughput])

if strategy.is_chief:
    logits = model.predict((test.features, test.ids), batch_size=4096, verbose=0)
    auc = tf.keras.metrics.AUC(from_logits=True)
    auc.update_state(test.labels, logits[:, 0])
    result = {
        "test_auc": float(auc.result()),
        "ground_truth_auc": float(test.oracle_auc),
        "examples_per_sec": throughput.examples_per_sec,
    }
    print("chief: test AUC %(test_auc).4f (ground truth %(ground_truth_auc).4f)" % result)
    print("chief: table rows %s" % strategy.client.tables()["fields"]["rows"], flush=True)
    if os.environ.get("FULCRUM_SUMMARY_JSON"):
        with open(os.environ["FULCRUM_SUMMARY_JSON"], "w") as f:
            json.dump(result, f)
