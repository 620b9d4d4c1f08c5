"""fulcrum.torch's embedding modules against real servers: the same outputs
and updates as torch.nn's on the same rows, any int64 id, a collection of
fields, and the mistakes refused."""

import numpy as np
import pytest
import torch

import fulcrum
import fulcrum.torch


class Bags(torch.nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.bag = fulcrum.torch.EmbeddingBag(3, mode=mode, optimizer=fulcrum.sgd(1.0))
        self.head = torch.nn.Linear(3, 1)

    def forward(self, ids, offsets=None, weights=None):
        return self.head(self.bag(ids, offsets, weights))


def reference_bag(client, table, ids, mode):
    """torch.nn.EmbeddingBag holding the servers' rows of `ids`, with the
    ids renumbered 0..n-1; and the renumbering."""
    unique = np.unique(ids)
    bag = torch.nn.EmbeddingBag(len(unique), 3, mode=mode)
    with torch.no_grad():
        bag.weight.copy_(torch.from_numpy(client.pull_rows(table, unique)))
    return bag, {int(u): i for i, u in enumerate(unique)}


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_an_embedding_bag_pools_and_learns_as_torchs_does(servers, mode):
    s = servers(num_ps=2)
    client = fulcrum.connect(s.hosts)
    torch.manual_seed(0)
    model = Bags(mode)
    replica = fulcrum.torch.Replica(model, client, fulcrum.sgd(0.1))
    ids = torch.tensor([5, 2**40, 7, 5, 123456789, 2**40], dtype=torch.int64)
    offsets = torch.tensor([0, 2, 5])
    bag, renumber = reference_bag(client, "bag", ids.numpy(), mode)
    local = torch.tensor([renumber[int(i)] for i in ids])
    ours = model.bag(ids, offsets)
    assert torch.allclose(ours, bag(local, offsets))

    model.zero_grad()
    model(ids, offsets).sum().backward()
    before = client.pull_rows("bag", ids.numpy())
    bag.zero_grad()
    model.head(bag(local, offsets)).sum().backward()
    replica.step()
    after = client.pull_rows("bag", ids.numpy())
    # SGD at learning rate 1 on the rows a step touched, as torch's gradient says.
    expected = before - bag.weight.grad[local].numpy()
    assert np.allclose(after, expected, atol=1e-6)


def test_embeddings_take_any_shape_of_ids_and_per_sample_weights(servers):
    s = servers(num_ps=1)
    client = fulcrum.connect(s.hosts)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = fulcrum.torch.Embedding(4, initializer=fulcrum.constant(0.5))
            self.bag = fulcrum.torch.EmbeddingBag(4, mode="sum", name="weighted")

    model = Model()
    fulcrum.torch.Replica(model, client, fulcrum.adagrad(0.1))
    out = model.emb(torch.tensor([[1, 2, 3], [3, 2, 1]]))
    assert out.shape == (2, 3, 4) and torch.equal(out, torch.full((2, 3, 4), 0.5))
    weights = torch.tensor([1.0, 2.0, 0.0])
    pooled = model.bag(torch.tensor([9, 9, 4]), torch.tensor([0]), weights)
    row9 = torch.from_numpy(client.pull_rows("weighted", [9]))
    assert torch.allclose(pooled, 3 * row9)
    assert sorted(t["name"] for t in client.describe()[0]["tables"]) == ["emb", "weighted"]


def test_a_collection_looks_every_field_up_at_once_and_pushes_in_the_step(servers):
    s = servers(num_ps=2)
    client = fulcrum.connect(s.hosts)
    collection = fulcrum.torch.EmbeddingBagCollection(
        [
            fulcrum.torch.EmbeddingBagConfig("user", 2, feature_names=["user", "friend"]),
            fulcrum.torch.EmbeddingBagConfig("item", 2, pooling="mean"),
        ],
        optimizer=fulcrum.sgd(1.0),
    )
    model = torch.nn.Sequential(collection)
    replica = fulcrum.torch.Replica(model, client, fulcrum.sgd(1.0))
    features = {
        "user": torch.tensor([[1], [2]]),
        "friend": torch.tensor([[2], [3]]),
        "item": (torch.tensor([10, 11, 12]), torch.tensor([0, 1])),
    }
    before = {
        t: client.pull_rows("0." + t, ids)
        for t, ids in [("user", [1, 2, 3]), ("item", [10, 11, 12])]
    }
    pooled = collection(features)
    assert torch.allclose(pooled["friend"][0], torch.from_numpy(before["user"][1]))
    assert torch.allclose(pooled["item"][1], torch.from_numpy(before["item"][1:].mean(0)))
    sum(p.sum() for p in pooled.values()).backward()
    replica.step()
    # Row 2 of "user" served a user and a friend: both gradients, summed.
    assert np.allclose(client.pull_rows("0.user", [2]), before["user"][1] - 2.0)
    assert np.allclose(client.pull_rows("0.item", [11, 12]), before["item"][1:] - 0.5)
    assert np.allclose(client.pull_rows("0.item", [10]), before["item"][0] - 1.0)


# Ids that leave room for the table in their top bits (one sort), and one
# that does not (sorted by table, then id).
@pytest.mark.parametrize("big", [1000, 2**62 + 5])
def test_a_collection_of_tables_of_two_widths_and_poolings_matches_torch_table_by_table(
    servers, big
):
    """Tables of one width share one lookup and one pooling call: the same
    ids in several tables stay apart, and each table gets its own rows'
    gradients, as separate torch.nn.EmbeddingBags would."""
    s = servers(num_ps=2)
    client = fulcrum.connect(s.hosts)
    configs = [
        fulcrum.torch.EmbeddingBagConfig("a", 2),
        fulcrum.torch.EmbeddingBagConfig("b", 2, pooling="mean"),
        fulcrum.torch.EmbeddingBagConfig("c", 3),
        fulcrum.torch.EmbeddingBagConfig("d", 2),
    ]
    collection = fulcrum.torch.EmbeddingBagCollection(configs, optimizer=fulcrum.sgd(1.0))
    model = torch.nn.Sequential(collection)
    replica = fulcrum.torch.Replica(model, client, fulcrum.sgd(1.0))
    features = {
        "a": torch.tensor([[7, 8], [big, 7]]),
        "b": torch.tensor([[7, 7], [8, 9]]),
        "c": (torch.tensor([7, big, 3]), torch.tensor([0, 1, 1])),  # an empty bag
        "d": torch.tensor([[8, 7], [7, 7]]),
    }
    flat = {f: (v[0] if isinstance(v, tuple) else v).reshape(-1) for f, v in features.items()}
    reference, renumber = {}, {}
    for c in configs:
        unique = np.unique(flat[c.name].numpy())
        renumber[c.name] = {int(u): i for i, u in enumerate(unique)}
        reference[c.name] = torch.nn.EmbeddingBag(len(unique), c.embedding_dim, mode=c.pooling)
        with torch.no_grad():
            rows = client.pull_rows("0." + c.name, unique)
            reference[c.name].weight.copy_(torch.from_numpy(rows))
    before = {c.name: client.pull_rows("0." + c.name, flat[c.name].numpy()) for c in configs}
    pooled = collection(features)
    weights = {f: torch.arange(1.0, 1.0 + p.numel()).reshape(p.shape) for f, p in pooled.items()}
    sum((p * weights[f]).sum() for f, p in pooled.items()).backward()
    replica.step()
    for name, value in features.items():
        ids, offsets = value if isinstance(value, tuple) else (value, None)
        local = torch.tensor([renumber[name][int(i)] for i in ids.reshape(-1)]).reshape(ids.shape)
        expected = reference[name](local, offsets)
        assert torch.allclose(pooled[name], expected), name
        (expected * weights[name]).sum().backward()
        grad = reference[name].weight.grad[local.reshape(-1)].numpy()
        after = client.pull_rows("0." + name, flat[name].numpy())
        assert np.allclose(after, before[name] - grad, atol=1e-6), name


def test_a_lookup_with_no_ids_pools_empty_bags_and_steps(servers):
    """A batch that leaves a field, or every field, without ids (the last
    short batch of a filtered data set) is no error."""
    s = servers(num_ps=1)
    client = fulcrum.connect(s.hosts)
    collection = fulcrum.torch.EmbeddingBagCollection(
        [fulcrum.torch.EmbeddingBagConfig("a", 2), fulcrum.torch.EmbeddingBagConfig("b", 2)]
    )
    replica = fulcrum.torch.Replica(torch.nn.Sequential(collection), client, fulcrum.sgd(1.0))
    none = torch.zeros(0, 1, dtype=torch.int64)
    for features in ({"a": none, "b": none}, {"a": none, "b": torch.tensor([[4], [4]])}):
        pooled = collection(features)
        assert pooled["a"].shape == (0, 2) and pooled["b"].shape == (len(features["b"]), 2)
        sum(p.sum() for p in pooled.values()).backward()
        replica.step()
    assert client.tables()["0.b"]["rows"] == 1


def test_mistakes_are_refused_saying_what(servers):
    lone = fulcrum.torch.EmbeddingBag(2)
    with pytest.raises(RuntimeError, match="not in a fulcrum.torch.Replica"):
        lone(torch.tensor([[1]]))
    s = servers(num_ps=1)
    client = fulcrum.connect(s.hosts)
    model = torch.nn.Sequential(fulcrum.torch.EmbeddingBag(2))
    fulcrum.torch.Replica(model, client, fulcrum.sgd(0.1))
    with pytest.raises(ValueError, match="< 0"):
        model(torch.tensor([[-1]]))
    with pytest.raises(TypeError, match="not integers"):
        model(torch.tensor([[1.5]]))
    with pytest.raises(ValueError, match="sum or mean"):
        fulcrum.torch.EmbeddingBag(2, mode="max")
    collection = fulcrum.torch.EmbeddingBagCollection([fulcrum.torch.EmbeddingBagConfig("a", 2)])
    fulcrum.torch.Replica(torch.nn.Sequential(collection), client, fulcrum.sgd(0.1))
    with pytest.raises(KeyError, match="no table serves feature"):
        collection({"b": torch.tensor([[1]])})
    with pytest.raises(ValueError, match="feature 'a': ids of shape \\(3,\\); give a 2-D"):
        collection({"a": torch.tensor([1, 2, 3])})


class SparseModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 2, sparse=True)
        self.head = torch.nn.Linear(2, 1)

    def forward(self, ids):
        return self.head(self.emb(ids))


def test_a_torch_embedding_with_sparse_gradients_is_a_table_pushed_by_row(servers):
    s = servers(num_ps=2, workers=2)
    torch.manual_seed(0)
    chief = fulcrum.connect(s.hosts, worker_id=0)
    model = SparseModel()
    replica = fulcrum.torch.Replica(model, chief, fulcrum.sgd(1.0))
    described = chief.describe()
    assert sorted(sh["variable"] for d in described for sh in d.get("shards", [])) == [
        "head.bias",
        "head.weight",
    ]  # the embedding's weight is no dense variable
    initial = chief.pull_rows("emb.weight", [3, 7])  # N(0, 1), as torch initialises it
    model(torch.tensor([3, 3, 7])).sum().backward()
    assert torch.equal(model.emb.weight[[3, 7]].detach(), torch.from_numpy(initial))
    grad_rows = model.head.weight.detach().clone().numpy()[0]
    replica.step()
    after = chief.pull_rows("emb.weight", [3, 7])
    np.testing.assert_allclose(after, initial - np.stack([2 * grad_rows, grad_rows]), rtol=1e-6)
    assert chief.tables()["emb.weight"]["rows"] == 2  # only the rows pushed are stored

    # Another worker's module, initialised otherwise, reads the servers' rows.
    torch.manual_seed(1)
    other = SparseModel()
    fulcrum.torch.Replica(other, fulcrum.connect(s.hosts, worker_id=1), fulcrum.sgd(1.0))
    with torch.no_grad():
        other(torch.tensor([7, 3]))
    assert torch.equal(other.emb.weight[[3, 7]], torch.from_numpy(after))

    with pytest.raises(ValueError, match="padding_idx or max_norm"):
        fulcrum.torch.Replica(
            torch.nn.Embedding(5, 2, sparse=True, padding_idx=0), chief, fulcrum.sgd(1.0)
        )
    with pytest.raises(IndexError, match=r"ids must lie in \[0, 50\)"):
        model(torch.tensor([50]))
