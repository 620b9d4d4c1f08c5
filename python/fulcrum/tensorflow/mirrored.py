"""fulcrum.tensorflow.MultiWorkerMirroredStrategy: every worker keeps the
variables, their gradients averaged by Fulcrum's elastic all-reduce
(fulcrum.collective), with no parameter servers."""

import sys

import numpy as np

from fulcrum import _fulcrum
from fulcrum import client as _client
from fulcrum import collective as _collective
from fulcrum.tensorflow import strategy as _strategy


class MultiWorkerMirroredStrategy(_strategy.Strategy):
    """Trains the program's Keras models by all-reduce among the job's
    workers, as TensorFlow's MultiWorkerMirroredStrategy does, on
    fulcrum.collective: a worker killed mid-run is left out and the others
    go on; restarted, it rejoins and takes the group's state. The cluster
    comes from TF_CONFIG (or `cluster_spec`, or the container entrypoint's
    variables), this worker's address in it being where it serves its
    peers, and the security settings from the environment. Keyword
    arguments go to fulcrum.collective.Group (timeout, startup_timeout,
    bind_host).

    Each process is one replica (num_replicas_in_sync is 1): its batches
    are its own, and a step applies the mean of the workers' gradients with
    the Keras optimizer's update, run by Fulcrum's optimizer code on every
    worker. The variables are those the adopted optimizers apply gradients
    to in their first apply_gradients: a group's variables are fixed once
    it starts.

    Given a checkpoint directory (the launcher's --checkpoint_dir, as
    $FULCRUM_CHECKPOINT_DIR), the chief checkpoints its replica as the C++
    chief does, and a job started again resumes from the newest one: its
    values, its optimizer's slots, and the data at its step."""

    def __init__(self, *, cluster_spec=None, **group):
        super().__init__()
        self._cluster_spec = cluster_spec
        self._group_options = group
        self._group = None
        self._joined = None
        cluster = _client.resolve_cluster(cluster_spec)
        self._rank_and_size = cluster["replica_id"], cluster["num_replicas"]

    @property
    def group(self):
        """The fulcrum.collective.Group (None before the first step)."""
        return self._group

    def _worker(self):
        return self._rank_and_size

    def _deal(self, epoch):
        if self._group is None:
            return self._rank_and_size
        return self._group.share(epoch)

    def _resumed(self, steps_per_epoch):
        if self._group is None:
            return None
        return self._group.resumed_batches(steps_per_epoch)

    def _create(self, new):
        if self._group is not None:
            raise ValueError(
                "variables %s were applied after the group started: with "
                "MultiWorkerMirroredStrategy, apply every variable's gradient in the first "
                "apply_gradients" % ", ".join(new)
            )
        self._group = _collective.Group(
            list(self._specs.values()), cluster_spec=self._cluster_spec, **self._group_options
        )
        out = {name: np.empty(self._specs[name]["shape"], np.float32) for name in new}
        self._group.start(self._initial_values(new), out)
        self._load(out)
        # A worker that joined a running group took part, with no
        # gradients, until the group reached the first epoch dealt over it;
        # the batch that made it join belongs to no step of its share.
        self._joined = out if self._group.step_count > 0 else None

    def _bound_before_steps(self):
        self._joined = None  # no batch was taken before it joined

    def _exchange(self, names, grads):
        if self._joined is not None:
            values, self._joined = self._joined, None
            return [values[name] for name in names]
        out = {name: np.empty(grads[name].shape, np.float32) for name in names}
        epoch, ends_epoch = self._step_place()
        self._group.step(grads, out, epoch=epoch, ends_epoch=ends_epoch)
        return [out[name] for name in names]

    def _end(self):
        # The chief's last checkpoint, given a directory, as the C++ chief
        # writes at the end; the links close with the process.
        if self._group is not None:
            try:
                self._group.checkpoint()
            except _fulcrum.Error as e:
                print("fulcrum: the last checkpoint failed: %s" % e, file=sys.stderr)
