#!/usr/bin/env python3
"""Keras Model.compile and Model.fit on Fulcrum, as TensorFlow's guide
"Distributed training with Keras" writes them, with one line changed.

The model is compiled in strategy.scope(): its Adam runs on the parameter
servers, and fit trains on this worker's share of the data. Run it through
the launcher:

  local_cluster --num_ps=2 --num_workers=3 --mode=sync \\
      --worker_command="python3 examples/keras_fit.py" -- --epochs=5

or by all-reduce, with no servers:

  local_cluster --num_ps=0 --num_workers=3 --strategy=multi_worker_mirrored \\
      --worker_command="python3 examples/keras_fit.py" -- --epochs=5

--epochs, --train_examples and --test_examples size the run; the launcher's
own flags are ignored.
"""

import argparse
import json
import os

import tensorflow as tf

import fulcrum.data
import fulcrum.tensorflow

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--train_examples", type=int, default=0, help="The first N (0: all).")
parser.add_argument("--test_examples", type=int, default=0, help="The first N (0: all).")
parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
args, _ = parser.parse_known_args()  # the launcher's flags are not this program's

# The only line changed from the guide: tf.distribute.MirroredStrategy().
# from_environment() is the launcher's --strategy: ParameterServerStrategy()
# by default, MultiWorkerMirroredStrategy() with multi_worker_mirrored.
strategy = fulcrum.tensorflow.from_environment()

train, test = (
    fulcrum.data.load("fashion_mnist", split, data_dir=args.data_dir) for split in ("train", "test")
)
BATCH_SIZE = 64 * strategy.num_replicas_in_sync
train_dataset = (
    tf.data.Dataset.from_tensor_slices(
        (train.features[: args.train_examples or None], train.labels[: args.train_examples or None])
    )
    .shuffle(10000)
    .batch(BATCH_SIZE)
)
test_dataset = tf.data.Dataset.from_tensor_slices(
    (test.features[: args.test_examples or None], test.labels[: args.test_examples or None])
).batch(BATCH_SIZE)

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input((784,)),
            tf.keras.layers.Dense(256, activation="relu"),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.Adam(0.001),
        metrics=["accuracy"],
    )

# Not in the guide: the job's examples/s after the first steps (which trace
# the step), for the benchmark.
throughput = fulcrum.tensorflow.Throughput(BATCH_SIZE, strategy.num_workers)
# As the guide's multi-worker tutorial has it; on Fulcrum the cluster does
# its work (a restarted worker resumes at the job's epoch), so fit leaves
# it out.
backup = tf.keras.callbacks.BackupAndRestore(backup_dir="/tmp/keras_fit_backup")
model.fit(train_dataset, epochs=args.epochs, verbose=2, callbacks=[backup, throughput])
eval_loss, eval_acc = model.evaluate(test_dataset, verbose=0)
print(f"Eval loss: {eval_loss}, Eval accuracy: {eval_acc}", flush=True)
# Not in the guide: the chief's result, for the tests and the benchmark.
if os.environ.get("FULCRUM_SUMMARY_JSON"):
    with open(os.environ["FULCRUM_SUMMARY_JSON"], "w") as f:
        rate = throughput.examples_per_sec
        json.dump({"test_accuracy": eval_acc, "test_loss": eval_loss, "examples_per_sec": rate}, f)
