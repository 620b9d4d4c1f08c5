"""fulcrum.torch: any torch.nn.Module as a parameter-server replica.

    import fulcrum, fulcrum.torch
    client = fulcrum.connect(mode="sync")
    replica = fulcrum.torch.Replica(model, client, fulcrum.sgd(0.05))
    for x, y in loader:
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        replica.step()        # gradients out, the servers' new values into the parameters

The module's trainable parameters become variables named as in
named_parameters(). The chief creates them with its own initial values; the
other workers wait until they exist, and every replica starts from the
servers' values. step() pushes each parameter's .grad (zeros for a parameter
that got none) straight from the tensor and pulls the new values straight
into the parameters, in one round trip per server: no copies in Python.
Parameters must be float32, on the CPU or a CUDA device; a CUDA parameter
goes through pinned host copies of its value and gradient, its gradient
copied out while the backward pass goes on. Buffers (BatchNorm statistics) stay
local to each replica. The weight of a torch.nn.Embedding or EmbeddingBag
with sparse=True is a table of the servers, not a dense variable: its sparse
gradient is pushed as rows, and each forward pulls the rows it uses.

Embeddings: fulcrum.torch.Embedding, EmbeddingBag and EmbeddingBagCollection
are modules whose weights are Fulcrum tables, keyed by any int64 id >= 0 (no
vocabulary size, no hashing). Forward pulls the batch's unique rows (one call
per server, all of a collection's tables in it); backward gives their
gradients; step() pushes them as row pushes, then the dense parameters.

    class Ctr(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fields = fulcrum.torch.EmbeddingBagCollection(
                [fulcrum.torch.EmbeddingBagConfig("f%d" % i, 16) for i in range(26)],
                optimizer=fulcrum.adagrad(0.05))
            self.top = torch.nn.Linear(26 * 16, 1)
        def forward(self, ids):                     # {"f0": (ids, offsets), ...}
            pooled = self.fields(ids)
            return self.top(torch.cat([pooled["f%d" % i] for i in range(26)], 1))
"""

import collections

import numpy as np
import torch
import torch.nn.functional as F

from fulcrum import specs as _specs


class Replica:
    """Wraps `module` for `client` (a fulcrum.Client); `optimizer` (e.g.
    fulcrum.sgd(0.1)) is applied on the servers; `partitioner` (e.g.
    fulcrum.min_size(...)) splits large parameters over them."""

    def __init__(self, module, client, optimizer, partitioner=None, wait_timeout=120.0):
        self.module = module
        self.client = client
        # torch.nn.Embedding and EmbeddingBag with sparse=True: their weights
        # are tables of the servers, rows pulled as a forward needs them.
        self._sparse = [
            _SparseWeight(self, path, m)
            for path, m in module.named_modules()
            if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))
            and m.sparse
            and m.weight.requires_grad
        ]
        sparse_weights = {id(w.module.weight) for w in self._sparse}
        self._params = [
            (name, p)
            for name, p in module.named_parameters()
            if p.requires_grad and id(p) not in sparse_weights
        ]
        for name, p in self._params:
            if p.dtype != torch.float32 or p.device.type not in ("cpu", "cuda"):
                raise TypeError(
                    "parameter '%s' is %s on %s; fulcrum.torch takes float32 parameters "
                    "on the CPU or a CUDA device" % (name, p.dtype, p.device)
                )
        # CUDA parameters travel through host copies of their own.
        self._staged = {
            name: _StagedParameter(p) for name, p in self._params if p.device.type == "cuda"
        }
        # Tables of the embedding modules, created on every server by every
        # worker (idempotent), named by their place in the module.
        self._tables = [m for m in module.modules() if isinstance(m, _Tables)]
        table_specs = [w.spec(optimizer) for w in self._sparse]
        for path, m in module.named_modules():
            if isinstance(m, _Tables):
                table_specs += m._bind(self, path, optimizer)
        if table_specs:
            client.create_tables(table_specs)
        variables = [
            _specs.variable(name, p.shape, optimizer, partitioner=partitioner)
            for name, p in self._params
        ]
        # Views sharing the parameters' storage (pulls write the parameters),
        # or a CUDA parameter's host copy.
        self._values = {
            name: self._staged[name].value if name in self._staged else p.detach()
            for name, p in self._params
        }
        if not self._params:
            return
        if client.is_chief:
            for staged in self._staged.values():
                staged.download_value()
            client.create_variables(variables, initial_values=self._values)
        else:
            client.wait_for_variables([name for name, _ in self._params], timeout=wait_timeout)
            client.create_variables(variables)
        self.pull()

    @property
    def values(self):
        """The parameters' tensors by variable name (sharing their storage)."""
        return dict(self._values)

    def _gradients(self):
        grads = {}
        for name, p in self._params:
            if name in self._staged:
                grads[name] = self._staged[name].gradient()
                continue
            g = p.grad
            if g is None:
                g = torch.zeros_like(p)  # a parameter this step did not reach
            grads[name] = g.detach().contiguous()
        for staged in self._staged.values():
            staged.await_gradient()
        return grads

    def _pull_into(self, call):
        """Runs `call` (which writes self._values) and hands the pulled
        values to the CUDA parameters."""
        for staged in self._staged.values():
            staged.await_upload()  # the host copies are free to write
        result = call()
        for staged in self._staged.values():
            staged.upload()
        return result

    def step(self):
        """After backward(): pushes the embedding rows' gradients, then the
        dense gradients, and pulls the updated values into the parameters
        (in sync mode, once the step's mean is applied). Returns the dense
        push's fulcrum.PushStats."""
        with torch.no_grad():
            ids, grads = {}, {}
            for m in self._tables:
                for table, (i, g) in m._take_gradients().items():
                    ids[table], grads[table] = i, g
            for w in self._sparse:
                taken = w.take_gradient()
                if taken is not None:
                    ids[w.table], grads[w.table] = taken
            if ids:
                self.client.push_tables(ids, grads)
            if not self._params:
                return None
            grads = self._gradients()
            return self._pull_into(lambda: self.client.push_pull(grads, self._values))

    def pull(self):
        """Pulls the servers' current values into the parameters."""
        with torch.no_grad():
            self._pull_into(lambda: self.client.pull(self._values))

    def local_state(self):
        """What this replica keeps that the servers do not: the module's
        buffers (BatchNorm statistics), by name, for a checkpoint's state."""
        return {"buffer:" + name: b for name, b in self.module.named_buffers()}

    def load_local_state(self, state):
        """Copies the buffers of `state` (from local_state(), as a checkpoint
        gave it back) into the module's; entries of other names are ignored."""
        with torch.no_grad():
            for name, b in self.module.named_buffers():
                saved = state.get("buffer:" + name)
                if saved is not None:
                    b.copy_(torch.as_tensor(saved))


class _StagedParameter:
    """A CUDA parameter's host side: the servers read and write host memory,
    so its value and its gradient each have a host copy, pinned, which the
    copies reach by DMA without holding up the host. Its gradient is copied
    out on a stream of its own as soon as autograd has accumulated it (a
    hook on the parameter's AccumulateGrad node, as Horovod's and DDP's),
    overlapping the backward pass of the layers below; a gradient changed in
    place after that (clipping) is copied again at the step. The pulled
    value goes back to the device on the parameter's stream: the next
    forward pass's kernels wait for it on the device, not the host."""

    def __init__(self, parameter):
        self.parameter = parameter
        self.value = torch.empty(parameter.shape, dtype=parameter.dtype, pin_memory=True)
        self._grad = torch.empty(parameter.shape, dtype=parameter.dtype, pin_memory=True)
        self._copy_stream = torch.cuda.Stream(parameter.device)
        self._copied = None  # (the .grad tensor, its version) the copy queued holds
        self._upload_done = None
        # The AccumulateGrad node of the parameter, reached through a view
        # of it; kept alive with it, since a hook dies with its node.
        self._accumulator = parameter.expand_as(parameter).grad_fn.next_functions[0][0]
        self._accumulator.register_hook(lambda *_: self._copy_gradient())

    def _copy_gradient(self):
        g = self.parameter.grad
        if g is None:
            return
        self._copy_stream.wait_stream(torch.cuda.current_stream(self.parameter.device))
        with torch.cuda.stream(self._copy_stream):
            self._grad.copy_(g, non_blocking=True)
            g.record_stream(self._copy_stream)
        self._copied = (g, g._version)

    def gradient(self):
        """The host copy of this step's gradient (zeros without one), its
        copy queued; await_gradient() before reading it."""
        g = self.parameter.grad
        if g is None:
            self._grad.zero_()
        elif self._copied is None or self._copied[0] is not g or self._copied[1] != g._version:
            self._copy_gradient()  # not copied by the hook, or changed since
        self._copied = None
        return self._grad

    def await_gradient(self):
        self._copy_stream.synchronize()

    def download_value(self):
        """The parameter's value into its host copy (the chief's initial value)."""
        self.value.copy_(self.parameter.detach())

    def upload(self):
        """The pulled value (its host copy) to the parameter, queued."""
        with torch.cuda.device(self.parameter.device):
            self.parameter.data.copy_(self.value, non_blocking=True)
            self._upload_done = torch.cuda.Event()
            self._upload_done.record()

    def await_upload(self):
        if self._upload_done is not None:
            self._upload_done.synchronize()


class _SparseWeight:
    """The weight of a torch.nn.Embedding or EmbeddingBag with sparse=True,
    kept as a Fulcrum table named as the parameter ("emb.weight"), ids its
    row numbers: before each forward the rows of the batch's ids are pulled
    into the module's weight, and step() pushes the rows of its sparse
    gradient, as fulcrum.torch.Embedding does. The rows start as the table's
    initializer makes them, N(0, 1) as torch initialises nn.Embedding, not
    as the module's weight held them."""

    def __init__(self, replica, path, module):
        self.table = (path + "." if path else "") + "weight"
        if module.padding_idx is not None or module.max_norm is not None:
            raise ValueError(
                "'%s': a sparse embedding with padding_idx or max_norm changes rows the "
                "servers hold; use fulcrum.torch.Embedding or EmbeddingBag (with "
                "per_sample_weights for padding) instead" % self.table
            )
        self.module = module
        self._client = replica.client
        module.register_forward_pre_hook(self._pull)

    def spec(self, optimizer):
        return _specs.table(
            self.table,
            self.module.embedding_dim,
            optimizer,
            initializer=_specs.random_normal(0.0, 1.0),
        )

    def _pull(self, module, args):
        with torch.no_grad():
            unique = torch.unique(torch.as_tensor(args[0]).long())
            if unique.numel() == 0:
                return
            if int(unique[0]) < 0 or int(unique[-1]) >= module.num_embeddings:
                raise IndexError(
                    "'%s': ids must lie in [0, %d)" % (self.table, module.num_embeddings)
                )
            rows = self._client.pull_rows(self.table, unique.cpu().numpy())
            device = module.weight.device
            module.weight[unique.to(device)] = torch.from_numpy(rows).to(device)

    def take_gradient(self):
        """(ids, rows) of the weight's sparse gradient, or None without one."""
        g = self.module.weight.grad
        if g is None:
            return None
        if not g.is_sparse:
            raise TypeError("'%s': the gradient of a sparse embedding came dense" % self.table)
        g = g.coalesce()
        return g.indices()[0].cpu().contiguous().numpy(), g.values().cpu().contiguous().numpy()


EmbeddingBagConfig = collections.namedtuple(
    "EmbeddingBagConfig",
    ["name", "embedding_dim", "feature_names", "pooling", "initializer", "max_rows", "admit_after"],
    defaults=(None, "sum", None, 0, 0),
)
EmbeddingBagConfig.__doc__ = """One table of an EmbeddingBagCollection, as TorchRec's: its `name`,
`embedding_dim`, the `feature_names` it serves (default: its name),
`pooling` ("sum" or "mean"), its `initializer` (default
fulcrum.random_uniform(-0.05, 0.05): a function of the table and the id, the
same on every server), and the server-side bounds `max_rows` (rows per server
kept, least recently used go; 0: no bound) and `admit_after` (an id is stored
at its N-th push)."""


def _default_initializer():
    return _specs.random_uniform(-0.05, 0.05)


class _Tables(torch.nn.Module):
    """A module whose weights are Fulcrum tables, bound to a Replica (which
    creates them) before use. Subclasses say their tables (_configs: local
    name -> EmbeddingBagConfig) and look rows up with _lookup."""

    def __init__(self, configs, optimizer):
        super().__init__()
        self._configs = dict(configs)
        self._optimizer = optimizer
        self._replica = None
        self._table_names = {}  # local name -> the table's name on the servers
        # Lookups since the last step: (tables, their unique ids, their
        # rows' bounds in the leaf tensor, the leaf tensor).
        self._pending = []

    def _bind(self, replica, path, default_optimizer):
        if self._replica is not None and self._replica is not replica:
            raise RuntimeError("an embedding module belongs to one Replica")
        self._replica = replica
        optimizer = self._optimizer or default_optimizer
        specs = []
        for local, config in self._configs.items():
            if local == "":  # a module of one table: its own name, or its place
                name = config.name or path
            else:  # a collection's: its place, then the table's
                name = "%s.%s" % (path, config.name) if path else config.name
            if not name:
                raise ValueError("an embedding module that is the whole model needs a name")
            self._table_names[local] = name
            specs.append(
                _specs.table(
                    name,
                    config.embedding_dim,
                    optimizer,
                    initializer=config.initializer or _default_initializer(),
                    max_rows=config.max_rows,
                    admit_after=config.admit_after,
                )
            )
        return specs

    def _lookup(self, requests):
        """Looks up `requests`, a list of (local table, int ids of any shape),
        in one call per server, each table's unique ids pulled once. Returns
        (inverse, rows) per request: the rows of every table of one width
        are one tensor (a leaf, which collects its gradient for the next
        step()), and inverse (flat) places the request's ids in it."""
        if self._replica is None:
            raise RuntimeError(
                "this embedding module is not in a fulcrum.torch.Replica yet: its table lives "
                "on the servers, which the Replica connects it to"
            )
        flat, by_width = [], collections.defaultdict(list)
        for i, (local, ids) in enumerate(requests):
            ids = torch.as_tensor(ids)
            if ids.dtype not in (torch.int64, torch.int32):
                raise TypeError("embedding ids of '%s': %s, not integers" % (local, ids.dtype))
            flat.append(ids.reshape(-1).long())
            by_width[self._configs[local].embedding_dim].append(i)
        order = list(self._configs)
        groups, ids_out, rows_out = [], {}, {}
        for width, members in by_width.items():
            tables = sorted({requests[i][0] for i in members}, key=order.index)
            tag = {t: k for k, t in enumerate(tables)}
            device = flat[members[0]].device
            ids = torch.cat([flat[i] for i in members]).cpu().numpy()
            if len(ids) and ids.min() < 0:
                bad = next(i for i in members if flat[i].numel() and int(flat[i].min()) < 0)
                raise ValueError(
                    "embedding ids of '%s': %d < 0" % (requests[bad][0], int(flat[bad].min()))
                )
            tags = np.repeat(
                np.array([tag[requests[i][0]] for i in members], dtype=np.int64),
                [flat[i].numel() for i in members],
            )
            unique, inverse, counts = _unique_by_table(ids, tags, len(tables))
            unique = torch.from_numpy(unique)
            # CUDA ids: the rows go there, through pinned memory.
            inverse = torch.from_numpy(inverse).to(device, non_blocking=True)
            rows = torch.empty(len(unique), width, pin_memory=device.type == "cuda")
            bounds = [sum(counts[:k]) for k in range(len(tables) + 1)]
            names = [self._table_names[t] for t in tables]
            for k, name in enumerate(names):
                ids_out[name] = unique[bounds[k] : bounds[k + 1]]
                rows_out[name] = rows[bounds[k] : bounds[k + 1]]
            groups.append((members, inverse, rows, names, bounds, device))
        self._replica.client.pull_tables(ids_out, rows_out)
        out = [None] * len(requests)
        track = self.training and torch.is_grad_enabled()
        for members, inverse, rows, names, bounds, device in groups:
            w = rows.to(device, non_blocking=True)
            if track:
                w.requires_grad_()
                self._pending.append((names, [ids_out[n] for n in names], bounds, w))
            at = 0
            for i in members:
                out[i] = (inverse[at : at + flat[i].numel()], w)
                at += flat[i].numel()
        return out

    def _take_gradients(self):
        """{table: (ids, row gradients)} of the lookups since the last step,
        repeats kept (a push sums them); forgets them."""
        ids, grads = collections.defaultdict(list), collections.defaultdict(list)
        for names, uniques, bounds, w in self._pending:
            if w.grad is None:
                continue
            g = w.grad.cpu()
            for k, name in enumerate(names):
                ids[name].append(uniques[k])
                grads[name].append(g[bounds[k] : bounds[k + 1]])
        self._pending = []
        return {t: (_cat(ids[t]).numpy(), _cat(grads[t]).contiguous().numpy()) for t in ids}


def _cat(tensors):
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _unique_by_table(ids, tags, num_tables):
    """The unique (table, id) pairs of `ids` (int64 NumPy) and `tags` (their
    tables, 0 <= tag < num_tables), in one pass over all tables: (unique
    ids, sorted by table then id; inverse, the place of each of `ids` in
    them; how many each table has). NumPy's sort, a tenth of the time of
    torch's on the CPU."""
    shift = 63 - max(1, (num_tables - 1).bit_length())
    if len(ids) == 0 or ids.max() < (1 << shift):
        # The table in the ids' top bits: one sort of one key.
        keys, inverse = np.unique(ids | (tags << shift), return_inverse=True)
        unique, table_of = keys & ((1 << shift) - 1), keys >> shift
    else:  # ids too large to share their bits: sorted by table, then id
        perm = np.lexsort((ids, tags))
        sorted_ids, sorted_tags = ids[perm], tags[perm]
        first = np.ones(len(ids), dtype=bool)
        first[1:] = (sorted_ids[1:] != sorted_ids[:-1]) | (sorted_tags[1:] != sorted_tags[:-1])
        inverse = np.empty_like(perm)
        inverse[perm] = np.cumsum(first) - 1
        unique, table_of = sorted_ids[first], sorted_tags[first]
    return unique, inverse, np.bincount(table_of, minlength=num_tables).tolist()


class Embedding(_Tables):
    """torch.nn.Embedding over a Fulcrum table: forward(input) gives each id's
    row, in input's shape plus embedding_dim. Ids are any int64 >= 0. The
    table is named `name` (default: the module's place in its model, as
    named_modules() says); `optimizer` (sparse Adagrad, lazy Adam, FTRL or
    SGD; default: the Replica's) is applied on the servers to the rows a
    step touched."""

    def __init__(
        self,
        embedding_dim,
        optimizer=None,
        initializer=None,
        max_rows=0,
        admit_after=0,
        name="",
    ):
        super().__init__(
            {
                "": EmbeddingBagConfig(
                    name, embedding_dim, None, "sum", initializer, max_rows, admit_after
                )
            },
            optimizer,
        )
        self.embedding_dim = embedding_dim

    def forward(self, input):
        input = torch.as_tensor(input)
        ((inverse, w),) = self._lookup([("", input)])
        return F.embedding(inverse.reshape(input.shape), w)


class EmbeddingBag(_Tables):
    """torch.nn.EmbeddingBag over a Fulcrum table: forward(input, offsets=None,
    per_sample_weights=None) pools each bag's rows by `mode` ("sum" or
    "mean"; per-sample weights with "sum"), taking input and offsets as
    torch.nn.EmbeddingBag does (a 2-D input of fixed-size bags, or a 1-D
    input with the bags' offsets). The rest as Embedding."""

    def __init__(
        self,
        embedding_dim,
        mode="mean",
        optimizer=None,
        initializer=None,
        max_rows=0,
        admit_after=0,
        name="",
    ):
        if mode not in ("sum", "mean"):
            raise ValueError("EmbeddingBag mode '%s': sum or mean" % mode)
        super().__init__(
            {
                "": EmbeddingBagConfig(
                    name, embedding_dim, None, mode, initializer, max_rows, admit_after
                )
            },
            optimizer,
        )
        self.embedding_dim, self.mode = embedding_dim, mode

    def forward(self, input, offsets=None, per_sample_weights=None):
        input = torch.as_tensor(input)
        ((inverse, w),) = self._lookup([("", input)])
        return F.embedding_bag(
            inverse.reshape(input.shape),
            w,
            offsets,
            mode=self.mode,
            per_sample_weights=per_sample_weights,
        )


class EmbeddingBagCollection(_Tables):
    """Many fields' embedding bags, as TorchRec's EmbeddingBagCollection:
    `tables` are EmbeddingBagConfigs; forward(features) takes {feature name:
    ids (a 2-D tensor of fixed-size bags) or (ids, offsets) (1-D ids, the
    bags' offsets)} and returns {feature name: pooled [bags, dim]}. Every
    table's rows of a step come in one call per server, however many fields
    there are."""

    def __init__(self, tables, optimizer=None):
        super().__init__({c.name: c for c in tables}, optimizer)
        self._feature_table = {}
        for c in tables:
            for feature in c.feature_names or [c.name]:
                if feature in self._feature_table:
                    raise ValueError("feature '%s' is served by two tables" % feature)
                self._feature_table[feature] = c.name

    def forward(self, features):
        unknown = sorted(set(features) - set(self._feature_table))
        if unknown:
            raise KeyError("no table serves feature(s) %s" % ", ".join(unknown))
        requests, bag_offsets = [], []
        for feature, value in features.items():
            ids, offsets = value if isinstance(value, tuple) else (value, None)
            ids = torch.as_tensor(ids)
            if offsets is None and ids.dim() != 2:
                raise ValueError(
                    "feature '%s': ids of shape %s; give a 2-D tensor of fixed-size bags, "
                    "or (ids, offsets)" % (feature, tuple(ids.shape))
                )
            requests.append((self._feature_table[feature], ids))
            bag_offsets.append(offsets)
        looked_up = self._lookup(requests)
        # One embedding_bag for all the features whose tables share a width
        # (and so a rows tensor) and a pooling, their bags side by side.
        pools = collections.defaultdict(list)
        for k, (table, _) in enumerate(requests):
            pools[(id(looked_up[k][1]), self._configs[table].pooling)].append(k)
        names, out = list(features), {}
        for (_, mode), members in pools.items():
            fixed = {tuple(requests[k][1].shape) for k in members}
            if all(bag_offsets[k] is None for k in members) and len(fixed) == 1:
                bags, size = next(iter(fixed))  # every feature's bags: one size
                counts, offsets = [bags] * len(members), None  # None: bags of one id
                if size != 1:
                    device = requests[members[0]][1].device
                    offsets = torch.arange(len(members) * bags, device=device) * size
            else:
                offsets, counts, start = [], [], 0
                for k in members:
                    ids, o = requests[k][1], bag_offsets[k]
                    if o is None:  # ids [bags, size]
                        o = torch.arange(ids.shape[0], device=ids.device) * ids.shape[1]
                    offsets.append(torch.as_tensor(o) + start)
                    counts.append(len(offsets[-1]))
                    start += ids.numel()
                offsets = torch.cat(offsets)
            inverse = _cat([looked_up[k][0] for k in members])
            w = looked_up[members[0]][1]
            if offsets is None:  # bags of one id: their rows (a backward with no sort)
                pooled = w.index_select(0, inverse)
            else:
                pooled = F.embedding_bag(inverse, w, offsets, mode=mode)
            for k, part in zip(members, pooled.split(counts), strict=True):
                out[names[k]] = part
        return out
