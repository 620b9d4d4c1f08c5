"""fulcrum.collective: the job's workers as an elastic all-reduce group, with
no parameter servers (the C++ worker's multi_worker_mirrored strategy).

    group = fulcrum.collective.Group([fulcrum.variable("w", (784, 10), fulcrum.adam(1e-3))])
    weights = {"w": np.empty((784, 10), np.float32)}
    group.start({"w": my_initial_w}, weights)     # the chief's values win
    for epoch in range(epochs):
        shard, shards = group.share(epoch)         # this worker's share of the epoch
        for batch in my_batches(shard, shards):
            grads = {"w": compute_gradient(weights["w"], batch)}
            group.step(grads, weights, epoch=epoch)   # the mean applied; new values land in place

Every worker keeps a whole replica of the variables and of their
optimizer's slots. A step sums the workers' gradients by a ring all-reduce
over gRPC (reduce-scatter, then all-gather) and every worker applies the
optimizer to their mean, so the replicas stay bit-identical. Where
TensorFlow's MultiWorkerMirroredStrategy fails the whole job when a worker
dies, the group leaves a lost worker out and goes on from the furthest
replica, and a worker that restarts (the same program, the same address)
rejoins at a step boundary and takes the group's state. Usable from any
framework: numpy arrays or CPU torch tensors in, in place.
"""

import json

from fulcrum import _fulcrum
from fulcrum import client as _client


class Group:
    """This worker's place in the group of the job's training workers, found
    as fulcrum.connect() finds a cluster (TF_CONFIG, else the TF_CONFIG file
    `cluster_spec`, else the container entrypoint's variables): every
    worker's address, this one's rank (the chief is 0), served on
    `bind_host` (default $FULCRUM_BIND_HOST, else all interfaces) at the
    port of its own address. Links are mutual TLS or carry the cluster
    token as the environment says (fulcrum.client.environment()).
    `variables` are fulcrum.variable specs, the same on every worker, their
    optimizers applied by each. A collective that takes longer than
    `timeout` seconds fails and the group regroups without whoever held it
    up; the chief waits `startup_timeout` seconds for every worker to start.
    `epochs`: the job's (a worker rejoining in the last one follows the group
    to its end); default: unbounded.

    Checkpoints: the chief, given `checkpoint_dir` (default
    $FULCRUM_CHECKPOINT_DIR, which the launcher's --checkpoint_dir sets),
    writes its replica there every `checkpoint_every_steps` steps or
    `checkpoint_every_secs` seconds (defaults: the environment's, else 0 and
    600) and at checkpoint(), in the servers' format, keeping the newest
    `keep_checkpoints`; a new group starts from the newest complete one, and
    resumed_batches() then says where the data resumes. The other workers
    write none."""

    def __init__(
        self,
        variables,
        *,
        cluster_spec=None,
        tf_config=None,
        bind_host=None,
        timeout=None,
        startup_timeout=600.0,
        epochs=1 << 40,
        checkpoint_dir=None,
        checkpoint_every_steps=None,
        checkpoint_every_secs=None,
        keep_checkpoints=5,
    ):
        env = _client.environment()
        resolved = _client.resolve_cluster(cluster_spec=cluster_spec, tf_config=tf_config)
        if resolved["replica_id"] is None:
            raise _fulcrum.InvalidArgument(
                "task %s:%d trains no share: an all-reduce group is of the chief and the workers"
                % (resolved["task_type"], resolved["task_index"])
            )
        self.rank = int(resolved["replica_id"])
        self.peers = list(resolved["replicas"])
        self.size = len(self.peers)
        self.variables = {spec["name"]: spec for spec in variables}
        self._native = _fulcrum.Collective(
            self.rank,
            self.peers,
            bind_host or env.get("bind_host", "0.0.0.0"),
            [json.dumps(spec) for spec in variables],
            float(timeout or env.get("collective_timeout_secs", 60)),
            float(startup_timeout),
            int(epochs),
            env.get("tls_cert", ""),
            env.get("tls_key", ""),
            env.get("tls_ca", ""),
            env.get("auth_token", ""),
            _fulcrum.CheckpointOptions(
                checkpoint_dir or env.get("checkpoint_dir", ""),
                int(_given(checkpoint_every_steps, env.get("checkpoint_every_steps", 0))),
                int(_given(checkpoint_every_secs, env.get("checkpoint_every_secs", 600))),
                int(keep_checkpoints),
            ),
        )
        self._started = False

    @property
    def is_chief(self):
        return self.rank == 0

    def start(self, initial_values, out):
        """Joins the group, once: the chief's `initial_values` ({name:
        float32 buffer}; those it does not name start from their specs'
        initializers) are every worker's first values, written into `out`
        ({name: buffer}, in place); a worker that restarted into a running
        group gets the group's current values instead."""
        self._native.start(dict(initial_values or {}), out)
        self._started = True

    def step(self, grads, out, epoch=0, ends_epoch=False):
        """Averages this worker's `grads` ({name: float32 buffer}; None: its
        batch is skipped, as a non-finite one is) with the others', applies
        the optimizer to the mean, and writes the new values into `out`.
        `epoch` and `ends_epoch` say where the batch lies (a rejoining
        worker learns from them where its data begins)."""
        self._native.step(grads, int(epoch), bool(ends_epoch), out)

    def share(self, epoch):
        """(shard, shards): this worker takes the examples i with i % shards
        == shard of `epoch`, dealt over the workers the group holds when it
        begins (a worker lost for good has its share dealt over the
        others). Before start(): (rank, size)."""
        if not self._started:
            return self.rank, self.size
        return self._native.deal_epoch(int(epoch))

    def resumed_batches(self, steps_per_epoch):
        """The batches this worker has trained already in a running job it
        rejoined (0 in a new one), of `steps_per_epoch` each."""
        return self._native.resumed_batches(self.size, int(steps_per_epoch))

    def checkpoint(self):
        """The chief, given a checkpoint directory: writes a checkpoint of the
        current step now (as at the end of training); elsewhere nothing."""
        self._native.checkpoint()

    @property
    def step_count(self):
        """The updates applied to the variables so far (the global step)."""
        return self._native.step_count


def _given(value, default):
    return default if value is None else value
