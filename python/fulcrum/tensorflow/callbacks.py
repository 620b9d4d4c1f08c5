"""Keras callbacks for jobs on Fulcrum."""

import time

import keras


class Throughput(keras.callbacks.Callback):
    """The job's training examples per second during Model.fit, as this
    worker sees them: its batches after the first `warmup_steps` (which
    trace the step), times `batch_size` and `num_workers` (every worker
    trains as many), over their wall time. `examples_per_sec` is None
    until more than `warmup_steps` batches have run."""

    def __init__(self, batch_size, num_workers=1, warmup_steps=10):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.warmup_steps = warmup_steps
        self.examples_per_sec = None
        self._seen = 0
        self._start = None

    def on_train_batch_end(self, batch, logs=None):
        self._seen += 1
        if self._seen == self.warmup_steps:
            self._start = time.monotonic()
        elif self._seen > self.warmup_steps:
            timed = self._seen - self.warmup_steps
            wall = time.monotonic() - self._start
            self.examples_per_sec = timed * self.batch_size * self.num_workers / wall
