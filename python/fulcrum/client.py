"""The Python client: Fulcrum's C++ PsClient behind a small Python API.

    import numpy as np, fulcrum
    with fulcrum.connect(mode="sync") as client:          # TF_CONFIG, as the daemons
        client.create_variables([fulcrum.variable("w", (784, 10), fulcrum.sgd(0.1))])
        weights = client.pull()                          # {"w": float32 array}
        for batch in data:
            grads = {"w": compute_gradient(weights["w"], batch)}
            client.push_pull(grads, weights)             # new values land in place

Tensors are the caller's own float32, C-contiguous buffers: NumPy arrays or
CPU torch tensors (anything with the buffer protocol or __dlpack__). Pulled
values are written into them in place and gradients are read from them, with
no copy in Python; anything else (float64, a strided view, a GPU tensor) is
refused with InvalidArgument rather than copied. Every call releases the GIL.
"""

import collections
import json
import os
import time

import numpy as np

from fulcrum import _fulcrum

PushStats = collections.namedtuple(
    "PushStats", ["applied", "accumulated", "stale", "duplicate", "lost", "max_staleness"]
)
PushStats.__doc__ = """What the servers did with a push, summed over shards: applied now,
accumulated (sync: waiting for the step's other gradients), stale (dropped),
duplicate (a retry, or a second push for one sync step), lost (their server
restarted), and the largest staleness seen."""


def _stats(native_stats):
    return PushStats(**native_stats)


class Future:
    """A push_pull in flight (Client.push_pull_async). The buffers it was given
    belong to the call until result() returns: do not read or change them
    before."""

    def __init__(self, native_future):
        self._native = native_future

    def done(self):
        """True once the call has finished (result() then returns at once)."""
        return self._native.done()

    def result(self, timeout=None):
        """The push's PushStats once the call is done; raises its error, or
        fulcrum.DeadlineExceeded past `timeout` seconds (the call goes on)."""
        return _stats(self._native.result(-1.0 if timeout is None else float(timeout)))


class Client:
    """A worker's (or a reader's) connection to the parameter servers.

    Make one with fulcrum.connect(). Calls from several threads run one at a
    time, in the order they take the client. As a context manager it sends
    heartbeats while open and, on a clean exit, tells the servers this worker
    has finished (the chief also that the job is done, unless told not to).
    """

    def __init__(
        self,
        native,
        *,
        worker_id,
        is_chief,
        addresses,
        num_replicas=1,
        heartbeat_interval=2.0,
        job_done_on_exit=None,
    ):
        self._native = native
        self._specs = {}
        self._tables = {}  # name -> width
        self.worker_id = worker_id
        self.is_chief = is_chief
        self.addresses = list(addresses)
        self.num_replicas = num_replicas  # training workers, the chief included
        self._finished = False
        self._heartbeat_interval = heartbeat_interval
        self._job_done_on_exit = is_chief if job_done_on_exit is None else job_done_on_exit

    # -- Context manager -----------------------------------------------------
    def __enter__(self):
        self.start_heartbeats()
        return self

    def start_heartbeats(self):
        """Keeps this worker's lease with the servers from now on (a thread
        sends heartbeats; none for a read-only client)."""
        if self.worker_id >= 0:
            self._native.start_heartbeats(self._heartbeat_interval)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None or self.worker_id < 0:
            return False  # a failed worker's lease lapses: the servers judge it dead
        self.finish()
        if self._job_done_on_exit:
            self.job_done("the chief's Python client finished")
        return False

    # -- Facts ---------------------------------------------------------------
    @property
    def mode(self):
        """ "async", "sync" or "ssp": as the servers run."""
        return self._native.mode

    @property
    def num_servers(self):
        return self._native.num_servers

    @property
    def step(self):
        """The lowest version among the shards of the last pull (sync: the global step)."""
        return self._native.step

    @property
    def clock(self):
        """Pushes made so far (the clock SSP calls carry)."""
        return self._native.clock

    def resumed_batches(self):
        """The batches each training worker has trained by `step`, as the
        mode counts them: where a restarted worker resumes (sync: the global
        step; async and ssp: the steps shared over the workers)."""
        return self._native.resumed_batches(self.num_replicas)

    def variables(self):
        """The specs of the variables created through this client, by name."""
        return dict(self._specs)

    # -- Variables -----------------------------------------------------------
    def create_variables(self, specs, initial_values=None):
        """Creates variables (fulcrum.variable specs) on the servers, partitioned
        and placed as the C++ client does. Idempotent: every worker may call it
        with the same specs. `initial_values` ({name: array}) replace the
        initializer of the shards this call creates; shards that exist already
        (or come from a checkpoint) keep theirs, so the first creator's values
        win: let the chief pass them and the others wait_for_variables().
        A call names all of this client's variables: pull() and push() then
        know those of the last call only."""
        specs = list(specs)
        self._native.create_variables([json.dumps(s) for s in specs], dict(initial_values or {}))
        self._specs = {spec["name"]: spec for spec in specs}

    def create_tables(self, specs):
        """Creates embedding tables (fulcrum.table specs) on every server."""
        specs = list(specs)
        self._native.create_tables([json.dumps(s) for s in specs])
        for spec in specs:
            self._tables[spec["name"]] = int(spec["width"])

    def wait_for_variables(self, names, timeout=60.0):
        """Waits until every shard of each named variable exists on the
        servers (another worker, the chief, creates them); DeadlineExceeded
        naming the missing ones past `timeout` seconds."""
        self._await_servers(
            lambda: sorted(set(names) - self._complete_variables()),
            timeout,
            "variables not created on the servers",
        )

    def _await_servers(self, pending, timeout, what):
        """Polls the servers' state, with backoff, until `pending()` (read
        from describe()) is empty; DeadlineExceeded "<what> after N s: ..."
        naming what is still pending past `timeout` seconds."""
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            left = pending()
            if not left:
                return
            if time.monotonic() + delay > deadline:
                raise _fulcrum.DeadlineExceeded(
                    "%s after %.0f s: %s" % (what, timeout, ", ".join(str(x) for x in left))
                )
            time.sleep(delay)  # polling the servers' state, as TensorFlow's session manager does
            delay = min(delay * 2, 0.5)

    def _complete_variables(self):
        shards, expected = collections.defaultdict(set), {}
        for server in self.describe():
            for shard in server.get("shards", []):
                shards[shard["variable"]].add(shard["shard"])
                expected[shard["variable"]] = shard["num_shards"]
        return {name for name, n in expected.items() if len(shards[name]) == n}

    def _outputs(self, names=None):
        """New float32 arrays for the named variables (all created here by default)."""
        names = list(self._specs) if names is None else names
        out = {}
        for name in names:
            if name not in self._specs:
                raise _fulcrum.NotFound("variable '%s' was not created through this client" % name)
            out[name] = np.empty(self._specs[name]["shape"], dtype=np.float32)
        return out

    def pull(self, out=None, names=None):
        """Pulls variables into `out` ({name: float32 buffer of its shape}),
        in place, and returns it. Without `out`, into new NumPy arrays for
        `names` (default: every variable created through this client). In sync
        mode it waits for the step this worker's last push joined."""
        if out is None:
            out = self._outputs(names)
        self._native.pull(out)
        return out

    def push(self, grads):
        """Pushes gradients ({name: float32 buffer of the variable's shape});
        the servers' optimizer applies them. Returns PushStats."""
        return _stats(self._native.push(grads))

    def push_pull(self, grads, out):
        """Push, then pull into `out` once the push is applied, in one round trip
        per server. Returns the push's PushStats."""
        return _stats(self._native.push_pull(grads, out))

    def push_pull_async(self, grads, out):
        """push_pull on a thread of its own: returns a Future at once, so the
        next batch's forward pass can overlap the network. Later calls on this
        client wait for it."""
        return Future(self._native.push_pull_async(grads, out))

    # -- Embedding tables ----------------------------------------------------
    def pull_rows(self, table, ids, out=None):
        """The rows of `ids` (int64, any order, repeats allowed) of `table`, as
        a (len(ids), width) float32 array: `out` in place, or a new one."""
        return self.pull_tables({table: ids}, None if out is None else {table: out})[table]

    def push_rows(self, table, ids, grads):
        """Pushes a gradient row per id ((len(ids), width) float32); a repeated
        id's rows are summed. Returns PushStats."""
        return self.push_tables({table: ids}, {table: grads})

    def pull_tables(self, ids, out=None):
        """pull_rows for several tables at once ({table: ids}), in one call
        per server: {table: rows}, into `out` ({table: array}) in place or
        new arrays."""
        ids = {table: _as_ids(i) for table, i in ids.items()}
        if out is None:
            out = {}
        for table, i in ids.items():
            if table not in out:
                out[table] = np.empty((len(i), self._table_width(table)), dtype=np.float32)
        self._native.pull_rows(ids, out)
        return out

    def push_tables(self, ids, grads):
        """push_rows for several tables at once ({table: ids}, {table: rows}),
        in one call per server. Returns PushStats."""
        return _stats(
            self._native.push_rows({table: _as_ids(i) for table, i in ids.items()}, grads)
        )

    def tables(self):
        """Every embedding table on the servers, by name: {"width", "rows",
        "optimizer", "max_rows", "evictions", ...}, rows and counts summed
        over the servers (what `fulcrumctl tables` prints)."""
        out = {}
        for server in self.describe():
            for t in server.get("tables", []):
                sums = out.setdefault(
                    t["name"], {"width": int(t["width"]), "optimizer": t["optimizer"]}
                )
                for key in ("rows", "max_rows", "candidates", "evictions", "admissions"):
                    sums[key] = sums.get(key, 0) + int(t.get(key, 0))
        return out

    def read_table(self, table, slots=False):
        """Every row the servers store of `table`, as (ids, rows): int64 [n]
        and float32 [n, width], in no particular order, each id once; with
        `slots`, (ids, rows, slots) with the optimizer's per-row slots
        ([n, slots x width]). Ids never pushed are not stored (they read as
        their initial rows). The whole table comes into memory: for tables
        larger than that, export() streams. Read after the last step for an
        exact copy: rows stored or evicted meanwhile may be missed."""
        ids, rows, slot_rows = self._native.read_table(str(table), bool(slots))
        return (ids, rows, slot_rows) if slots else (ids, rows)

    def export(self, path, format=None):
        """Writes the trained model the servers hold to `path` as safetensors
        (or npz: format="npz", or a .npz path), the names and layout of
        `fulcrumctl export`: each variable by name, each table t as t.ids
        and t.rows. Variables are pulled one at a time and tables streamed,
        so memory holds the largest variable. The variables must have been
        created through this client (the chief's). Returns {"format",
        "tensors", "bytes"}."""
        return self._native.export(str(path), format or "")

    def _table_width(self, table):
        if table not in self._tables:
            raise _fulcrum.NotFound("embedding table '%s' was not created by this client" % table)
        return self._tables[table]

    # -- Membership and the servers ------------------------------------------
    def describe(self):
        """Every server's state (DescribeResponse as a dict), in task order. A
        server lost for good (out of the cluster's placement table, with
        replicated shards) is not asked: its entry is empty (incarnation 0)."""
        return [json.loads(s) for s in self._native.describe()]

    def heartbeat(self):
        self._native.heartbeat()

    def await_job_start(self):
        """sync and ssp: waits until no server awaits another worker's first
        contact (the servers' --startup_timeout_secs bounds it)."""
        self._native.await_job_start()

    def finish(self):
        """Tells every server this worker has finished training (after its last
        push). Once: later calls do nothing."""
        if not self._finished:
            self._native.finish()
            self._finished = True

    def await_workers_finished(self, timeout=600.0):
        """Waits until every training worker the servers have seen has finished
        or is dead: the chief's cue to evaluate final values (async, ssp)."""
        self._await_servers(
            lambda: sorted(
                {
                    w["worker_id"]
                    for server in self.describe()
                    for w in server.get("workers", [])
                    if w.get("seen") and w.get("live") and not w.get("finished")
                }
            ),
            timeout,
            "workers still training",
        )

    def job_done(self, reason="finished"):
        """The chief: tells every server the job is over; each exits 0 once
        every worker has finished or is dead."""
        self._native.job_done(reason)


def _as_ids(ids):
    if isinstance(ids, np.ndarray) and ids.dtype == np.int64 and ids.flags.c_contiguous:
        return ids
    if hasattr(ids, "__dlpack__") and not isinstance(ids, np.ndarray):
        return ids  # a torch tensor: checked (int64, contiguous) by the native side
    return np.ascontiguousarray(ids, dtype=np.int64)


_ENVIRONMENT = (
    "mode",
    "tls_cert",
    "tls_key",
    "tls_ca",
    "insecure",
    "checkpoint_dir",
    "cpu_threads",
    "strategy",
    "bind_host",
    "collective_timeout_secs",
    "checkpoint_every_steps",
    "checkpoint_every_secs",
    "ps_hosts",
    "worker_hosts",
    "chief_host",
    "task_type",
    "task_index",
)


def environment(environ=None):
    """What the launcher (local_cluster --worker_command) and the container
    image's entrypoint tell a program through its environment, as its
    flags tell a daemon: {"mode", "tls_cert", "tls_key", "tls_ca",
    "insecure", "checkpoint_dir", "cpu_threads", "strategy", ...} and,
    where there is no TF_CONFIG, the cluster as the entrypoint takes it
    {"ps_hosts", "worker_hosts", "chief_host", "task_type", "task_index"},
    for each FULCRUM_<NAME> set; "auth_token" (the cluster's) read from
    FULCRUM_AUTH_TOKEN_FILE and "control_token" (the chief's) from
    FULCRUM_CONTROL_TOKEN_FILE. A TLS setting given in part
    is an InvalidArgument: it never falls back to plaintext."""
    environ = os.environ if environ is None else environ
    env = {}
    for name in _ENVIRONMENT:
        value = environ.get("FULCRUM_" + name.upper(), "")
        if value:
            env[name] = value
    tls = [name for name in ("tls_cert", "tls_key", "tls_ca") if name in env]
    if tls and len(tls) != 3:
        raise _fulcrum.InvalidArgument(
            "FULCRUM_TLS_CERT, FULCRUM_TLS_KEY and FULCRUM_TLS_CA go together; only %s is set"
            % ", ".join("FULCRUM_" + name.upper() for name in tls)
        )
    if tls and "insecure" in env:
        raise _fulcrum.InvalidArgument("FULCRUM_INSECURE and FULCRUM_TLS_* are both set")
    for name in ("auth_token", "control_token"):
        token_file = environ.get("FULCRUM_%s_FILE" % name.upper())
        if token_file:
            try:
                with open(token_file) as f:
                    env[name] = f.read().strip()
            except OSError as e:
                raise _fulcrum.InvalidArgument(
                    "cannot read the token file %s: %s" % (token_file, e)
                ) from None
    return env


def _hosts(value):
    if isinstance(value, str):
        return [h for h in value.split(",") if h]
    return list(value)


def resolve_cluster(
    cluster_spec=None,
    tf_config=None,
    *,
    ps_hosts=None,
    worker_hosts=None,
    chief_host=None,
    task_type=None,
    task_index=0,
):
    """The cluster as the daemons resolve it: from the host flags' values
    (`ps_hosts` with `worker_hosts` and/or `chief_host`, `task_type`
    default "worker", `task_index`), else the TF_CONFIG JSON file
    `cluster_spec`, else `tf_config` (JSON text), else the TF_CONFIG
    environment variable, else the container entrypoint's FULCRUM_PS_HOSTS,
    FULCRUM_WORKER_HOSTS, FULCRUM_CHIEF_HOST, FULCRUM_TASK_TYPE and
    FULCRUM_TASK_INDEX. Returns {"ps": [addresses], "replicas": [the
    training replicas' addresses, the chief first], "num_replicas",
    "replica_id" (None for a task that trains no share), "task_type",
    "task_index"}; InvalidArgument naming what is wrong."""
    host_flags = worker_hosts is not None or chief_host is not None
    if tf_config is None:
        tf_config = os.environ.get("TF_CONFIG", "")
    if not (host_flags or cluster_spec or tf_config):
        env = environment()
        if "ps_hosts" in env or "worker_hosts" in env:  # the container image's entrypoint
            ps_hosts, worker_hosts = env.get("ps_hosts", ""), env.get("worker_hosts", "")
            chief_host = env.get("chief_host", "")
            task_type, task_index = env.get("task_type"), int(env.get("task_index", 0))
            host_flags = True
    return _fulcrum.resolve_cluster(
        cluster_spec or "",
        tf_config,
        ",".join(_hosts(ps_hosts)) if host_flags and ps_hosts else "",
        ",".join(_hosts(worker_hosts)) if worker_hosts else "",
        chief_host or "",
        (task_type or "worker") if host_flags else "",
        int(task_index),
    )


def connect(
    ps_hosts=None,
    *,
    worker_id=None,
    num_replicas=None,
    mode=None,
    cluster_spec=None,
    tf_config=None,
    call_timeout=60.0,
    retry_timeout=60.0,
    wire_dtype="float32",
    channels_per_server=1,
    heartbeat_interval=2.0,
    job_done_on_exit=None,
    check_mode=True,
    tls_cert=None,
    tls_key=None,
    tls_ca=None,
    auth_token=None,
    worker_hosts=None,
    chief_host=None,
    task_type=None,
    task_index=0,
    read_from_backups=False,
):
    """Connects to the parameter servers, found as the daemons find them:
    `ps_hosts` ("h:p,h:p" or a list) with `worker_id` (default 0, the chief;
    -1 reads only) and `num_replicas` (default 1); else the TF_CONFIG JSON file `cluster_spec`; else
    the daemons' host flags (`ps_hosts` with `worker_hosts` and/or
    `chief_host`, `task_type` default "worker", `task_index`); else
    `tf_config` (JSON text), else the TF_CONFIG environment variable. The
    worker id is then the task's replica id (the chief is 0; an evaluator
    reads only). `mode` ("sync", "async" or "ssp") defaults to the servers'
    own (without `check_mode`, which asks them: "async"); with
    `check_mode`, every server must run it (this waits for them, within
    retry_timeout). With `tls_cert`, `tls_key` and `tls_ca` (PEM
    files, as the daemons' flags take them), calls are mutual TLS;
    `auth_token` (the token itself, not its file) goes with every call, for
    servers that need one. Security settings not given are those of the
    environment the launcher and the container image's entrypoint set
    (environment()): a program run by them needs no flags. Without any,
    plaintext. A reader (worker id -1, an evaluator) with `read_from_backups`
    pulls each replicated shard from a ready backup copy rather than its
    primary (docs/replication.md). See docs/python.md and "Security"."""
    env = environment()
    if mode is None:
        mode = env.get("mode")
    if tls_cert is None and tls_key is None and tls_ca is None:
        tls_cert, tls_key, tls_ca = env.get("tls_cert"), env.get("tls_key"), env.get("tls_ca")
    if auth_token is None:  # the chief's control token, which servers take for both
        auth_token = env.get("control_token") or env.get("auth_token")
    host_flags = worker_hosts is not None or chief_host is not None
    if ps_hosts is not None and not host_flags and not cluster_spec:
        addresses = _hosts(ps_hosts)
        replica = 0 if worker_id is None else worker_id
        replicas = 1 if num_replicas is None else num_replicas
    else:
        resolved = resolve_cluster(
            cluster_spec,
            tf_config,
            ps_hosts=ps_hosts,
            worker_hosts=worker_hosts,
            chief_host=chief_host,
            task_type=task_type,
            task_index=task_index,
        )
        addresses = resolved["ps"]
        replicas = resolved["num_replicas"] if num_replicas is None else num_replicas
        replica = resolved["replica_id"]
        if replica is None:
            replica = -1
        if worker_id is not None:
            replica = worker_id
        if not addresses:
            raise _fulcrum.InvalidArgument(
                "the cluster spec lists no parameter servers (cluster.ps)"
            )

    def native_client(mode):
        return _fulcrum.Client(
            addresses,
            int(replica),
            mode,
            float(call_timeout),
            float(retry_timeout),
            wire_dtype,
            int(channels_per_server),
            tls_cert or "",
            tls_key or "",
            tls_ca or "",
            auth_token or "",
            bool(read_from_backups),
        )

    native = native_client(mode or "async")
    if mode is None and check_mode:  # the servers' own, as the first asked says
        asked = [s for s in map(json.loads, native.describe()) if was_asked(s)]
        runs = asked[0].get("mode", "").lower() if asked else ""
        if runs and runs != native.mode:
            native = native_client(runs)
    client = Client(
        native,
        worker_id=int(replica),
        is_chief=replica == 0,
        addresses=addresses,
        num_replicas=int(replicas),
        heartbeat_interval=heartbeat_interval,
        job_done_on_exit=job_done_on_exit,
    )
    if check_mode:
        _check_modes(client.describe(), client.mode, addresses)
    return client


def was_asked(server):
    """Whether a describe() entry is a server's answer: one lost for good is
    not asked, and its entry is empty (a running server's incarnation is
    never 0), as WasAsked in common/describe_text.h says."""
    return int(server.get("incarnation", 0)) != 0


def _check_modes(servers, mode, addresses):
    """FailedPrecondition naming the first server (of describe()'s entries)
    whose consistency mode is not `mode`; a server lost for good is
    skipped."""
    for i, server in enumerate(servers):
        if not was_asked(server):
            continue
        runs = server.get("mode", "").lower()
        if runs != mode:
            raise _fulcrum.FailedPrecondition(
                "client mode %s but ps %d (%s) runs %s; use the servers' --mode"
                % (mode, i, addresses[i], runs)
            )
