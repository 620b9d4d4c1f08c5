"""fulcrum.data: a training set dealt over the job's workers, as the C++
worker deals it.

    dealer = fulcrum.data.Dealer(client, len(train_x), batch_size=64, epochs=10, seed=1)
    for batch in dealer:                 # this worker's batches, epoch by epoch
        x, y = train_x[batch.indices], train_y[batch.indices]
        ...

Each epoch, worker r of n takes the examples i with i % n == r, shuffled by
(seed, epoch, r) and cut into whole batches: every worker gets as many, so
synchronous workers stay in step, and a job of the C++ worker with the same
seed trains the same batches. As each later epoch begins the dealer asks the
servers who is left: a worker they all hold gone for good has its share
dealt over the others, so every example is still seen. A restarted worker
(the chief among them) resumes where the servers' step says the job is
(`client.resumed_batches()`), not at epoch 0.

A Dealer is also a batch sampler: torch.utils.data.DataLoader(dataset,
batch_sampler=dealer) loads its batches.

A Criteo file too large to load streams instead, dealt alike:

    for batch in fulcrum.data.Stream(client, "/data/criteo", batch_size=256, epochs=3):
        ...  # batch.features, batch.labels, batch.ids
"""

import collections
import logging

from fulcrum import _fulcrum


class Batch:
    """A batch: its example `indices` (an int64 NumPy array), its `epoch`
    (from 0), and its place in that epoch's dealing (`step_in_epoch` of
    `steps_in_epoch`). Iterating it (or len()) goes over its indices, as a
    batch sampler's batch does."""

    __slots__ = ("indices", "epoch", "step_in_epoch", "steps_in_epoch")

    def __init__(self, indices, epoch, step_in_epoch, steps_in_epoch):
        self.indices = indices
        self.epoch = epoch
        self.step_in_epoch = step_in_epoch
        self.steps_in_epoch = steps_in_epoch

    def __iter__(self):
        return iter(self.indices.tolist())

    def __len__(self):
        return len(self.indices)

    def __repr__(self):
        return "Batch(epoch=%d, step %d of %d, %d examples)" % (
            self.epoch,
            self.step_in_epoch,
            self.steps_in_epoch,
            len(self.indices),
        )


_log = logging.getLogger("fulcrum.data")

Dataset = collections.namedtuple(
    "Dataset", ["features", "labels", "ids", "num_classes", "oracle_auc"]
)
Dataset.__doc__ = """A data set's split as NumPy arrays: `features` (float32, [n, d]),
`labels` (int32, [n]), `ids` (int64, [n, fields]: one categorical id per
field; [n, 0] for dense data), `num_classes`, and `oracle_auc` (the AUC of
the true click probabilities where the generator knows them, synthetic_ctr;
else negative)."""


def load(
    kind,
    split="train",
    data_dir="/usr/share/datasets/fashion-mnist",
    num_classes=10,
    ctr_vocabulary=1000000,
    ctr_train_examples=1000000,
    ctr_test_examples=100000,
    seed=0,
    feature_dim=None,
):
    """The `split` ("train" or "test") of a data set exactly as the C++
    worker's --dataset loads it: fashion_mnist, idx or libsvm from
    `data_dir`, criteo (labelled Criteo TSV: train.txt and test.txt in
    `data_dir`) or synthetic_ctr (generated from `seed`, the same on every
    worker). The test split must be as wide as the training set: give its
    `feature_dim` (train.features.shape[1]) when you have it loaded, else
    the training set is loaded again to learn it. Errors name the file and
    line."""
    d = _fulcrum.load_dataset(
        kind,
        split,
        data_dir,
        num_classes,
        ctr_vocabulary,
        ctr_train_examples,
        ctr_test_examples,
        seed,
        -1 if feature_dim is None else int(feature_dim),
    )
    return Dataset(d["features"], d["labels"], d["ids"], d["num_classes"], d["oracle_auc"])


def share(client, num_workers, epoch):
    """This worker's share of `epoch` (from 0) as (shard, shards): it takes
    the examples i with i % shards == shard. The servers say who is gone for
    good, whose shares are dealt over the others; when they cannot be
    asked, the worker keeps its own share (worker_id, num_workers)."""
    own = client.worker_id, num_workers
    try:
        shard, shards, gone = client._native.deal_epoch(*own)
    except _fulcrum.Error as e:
        _log.warning(
            "epoch %d: cannot ask the servers who is left (%s); keeping this worker's share",
            epoch + 1,
            e,
        )
        return own
    if gone:
        _log.warning(
            "epoch %d: worker(s) %s gone for good; their share of the data is re-dealt "
            "over the %d worker(s) left",
            epoch + 1,
            ", ".join(str(w) for w in gone),
            shards,
        )
    return shard, shards


class _Dealt:
    """What Dealer and Stream share: a worker of the client's job, its
    batches resumed at the servers' step (with `resume`) and re-dealt as
    each later epoch begins (share). A subclass makes `_native` and names
    its batches' type `_batch`."""

    def __init__(self, client, resume):
        if client.worker_id < 0:
            raise _fulcrum.InvalidArgument(
                "a read-only client (worker_id -1) trains no share of the data"
            )
        self._client = client
        self.num_workers = client.num_replicas
        self.resumed = client.resumed_batches() if resume else 0

    def _deal(self, epoch):
        return share(self._client, self.num_workers, epoch)

    @property
    def steps_per_epoch(self):
        """Batches per epoch while no worker is gone."""
        return self._native.steps_per_epoch

    def __iter__(self):
        while True:
            batch = self._native.next()
            if batch is None:
                return
            yield self._batch(*batch)


class Dealer(_Dealt):
    """This worker's batches of `num_examples` examples (indices 0 to
    num_examples - 1), `batch_size` each, for `epochs` epochs, shuffled from
    `seed`, dealt over the job's `client.num_replicas` training workers.
    With `resume`, the batches the job has already trained (by the servers'
    step, once the client has pulled) are skipped. Iterate it once."""

    _batch = Batch

    def __init__(self, client, num_examples, batch_size, epochs=1, seed=0, resume=True):
        super().__init__(client, resume)
        self._native = _fulcrum.BatchDealer(
            int(num_examples),
            client.worker_id,
            self.num_workers,
            int(batch_size),
            int(epochs),
            int(seed),
            self.resumed,
            self._deal,
        )


StreamBatch = collections.namedtuple(
    "StreamBatch", ["features", "labels", "ids", "epoch", "step_in_epoch", "steps_in_epoch"]
)
StreamBatch.__doc__ = """A streamed batch's examples: `features` (float32,
[batch, 13]: the numeric fields as log(1 + x)), `labels` (int32, [batch]),
`ids` (int64, [batch, 26]: one id per categorical field), and its place,
as a Batch's."""


class Stream(_Dealt):
    """This worker's batches of a Criteo training file (train.txt in
    `data_dir`) too large to load, streamed as the C++ worker's
    --stream_data streams it: the file is counted and every line checked
    here, then each epoch it is read again, this worker's share (the dealing
    of Dealer, re-dealt and resumed alike) mixed through a buffer of
    `shuffle_buffer` examples, so memory does not grow with the file.
    Iterate it once; it yields StreamBatch."""

    _batch = StreamBatch

    def __init__(
        self,
        client,
        data_dir,
        batch_size,
        epochs=1,
        seed=0,
        shuffle_buffer=65536,
        resume=True,
    ):
        super().__init__(client, resume)
        self._native = _fulcrum.StreamDealer(
            str(data_dir),
            int(shuffle_buffer),
            client.worker_id,
            self.num_workers,
            int(batch_size),
            int(epochs),
            int(seed),
            self.resumed,
            self._deal,
        )

    @property
    def num_examples(self):
        """The examples of the file."""
        return self._native.num_examples
