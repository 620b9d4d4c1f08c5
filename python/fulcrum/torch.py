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
Parameters must be float32 CPU tensors. Buffers (BatchNorm statistics) stay
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
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(
                    "parameter '%s' is %s on %s; fulcrum.torch takes float32 CPU "
                    "parameters" % (name, p.dtype, p.device)
                )
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
        # Views sharing the parameters' storage: pulls write the parameters.
        self._values = {name: p.detach() for name, p in self._params}
        if not self._params:
            return
        if client.is_chief:
            client.create_variables(variables, initial_values=self._values)
        else:
            client.wait_for_variables([name for name, _ in self._params], timeout=wait_timeout)
            client.create_variables(variables)
        client.pull(self._values)

    @property
    def values(self):
        """The parameters' tensors by variable name (sharing their storage)."""
        return dict(self._values)

    def _gradients(self):
        grads = {}
        for name, p in self._params:
            g = p.grad
            if g is None:
                g = torch.zeros_like(p)  # a parameter this step did not reach
            grads[name] = g.detach().contiguous()
        return grads

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
            return self.client.push_pull(self._gradients(), self._values)

    def pull(self):
        """Pulls the servers' current values into the parameters."""
        with torch.no_grad():
            self.client.pull(self._values)

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
            rows = self._client.pull_rows(self.table, unique.numpy())
            module.weight[unique] = torch.from_numpy(rows)

    def take_gradient(self):
        """(ids, rows) of the weight's sparse gradient, or None without one."""
        g = self.module.weight.grad
        if g is None:
            return None
        if not g.is_sparse:
            raise TypeError("'%s': the gradient of a sparse embedding came dense" % self.table)
        g = g.coalesce()
        return g.indices()[0].contiguous().numpy(), g.values().contiguous().numpy()


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
    name -> EmbeddingBagConfig) and look rows up with _rows."""

    def __init__(self, configs, optimizer):
        super().__init__()
        self._configs = dict(configs)
        self._optimizer = optimizer
        self._replica = None
        self._table_names = {}  # local name -> the table's name on the servers
        self._pending = []  # (table, unique ids, their rows' leaf tensor)

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

    def _rows(self, ids_by_table):
        """{local table: int64 ids} -> {local table: (inverse, rows)}, the rows
        of the unique ids pulled in one call per server; rows (a leaf
        tensor) collect their gradient for the next step()."""
        if self._replica is None:
            raise RuntimeError(
                "this embedding module is not in a fulcrum.torch.Replica yet: its table lives "
                "on the servers, which the Replica connects it to"
            )
        uniques, inverses = {}, {}
        for local, ids in ids_by_table.items():
            ids = torch.as_tensor(ids)
            if ids.dtype not in (torch.int64, torch.int32):
                raise TypeError("embedding ids of '%s': %s, not integers" % (local, ids.dtype))
            if ids.numel() and int(ids.min()) < 0:
                raise ValueError("embedding ids of '%s': %d < 0" % (local, int(ids.min())))
            unique, inverse = torch.unique(ids.long(), return_inverse=True)
            uniques[self._table_names[local]] = unique.contiguous()
            inverses[local] = (inverse, self._table_names[local])
        rows = {
            table: torch.empty(len(uniques[table]), self._configs[local].embedding_dim)
            for local, (_, table) in inverses.items()
        }
        self._replica.client.pull_tables(uniques, rows)
        out = {}
        track = self.training and torch.is_grad_enabled()
        for local, (inverse, table) in inverses.items():
            w = rows[table]
            if track:
                w.requires_grad_()
                self._pending.append((table, uniques[table], w))
            out[local] = (inverse, w)
        return out

    def _take_gradients(self):
        """{table: (ids, row gradients)} of the lookups since the last step,
        repeats kept (a push sums them); forgets them."""
        ids, grads = collections.defaultdict(list), collections.defaultdict(list)
        for table, unique, w in self._pending:
            if w.grad is not None:
                ids[table].append(unique)
                grads[table].append(w.grad)
        self._pending = []
        return {
            t: (torch.cat(ids[t]).numpy(), torch.cat(grads[t]).contiguous().numpy()) for t in ids
        }


def _pool(inverse, w, offsets, mode, per_sample_weights):
    return F.embedding_bag(inverse, w, offsets, mode=mode, per_sample_weights=per_sample_weights)


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
        inverse, w = self._rows({"": input})[""]
        return F.embedding(inverse.reshape(torch.as_tensor(input).shape), w)


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
        inverse, w = self._rows({"": input})[""]
        return _pool(inverse.reshape(input.shape), w, offsets, self.mode, per_sample_weights)


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
        parts, by_table = {}, collections.defaultdict(list)
        for feature, value in features.items():
            ids, offsets = value if isinstance(value, tuple) else (value, None)
            ids = torch.as_tensor(ids)
            parts[feature] = (ids, offsets)
            by_table[self._feature_table[feature]].append(ids.reshape(-1))
        # One lookup per table of all its features' ids; split back after.
        looked_up = self._rows({t: torch.cat(ids) for t, ids in by_table.items()})
        out, start = {}, collections.defaultdict(int)
        for feature, (ids, offsets) in parts.items():
            table = self._feature_table[feature]
            inverse, w = looked_up[table]
            n = ids.numel()
            mine = inverse[start[table] : start[table] + n].reshape(ids.shape)
            start[table] += n
            out[feature] = _pool(mine, w, offsets, self._configs[table].pooling, None)
        return out
