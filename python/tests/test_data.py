"""fulcrum.data against real servers: shares, resuming at the servers' step,
re-dealing a worker gone for good, and loading through torch's DataLoader."""

import time

import numpy as np
import pytest
import torch

import fulcrum


def counter_spec():
    return fulcrum.variable("v", (2,), fulcrum.sgd(1.0))


def test_workers_shares_are_disjoint_whole_batches_reshuffled_each_epoch(servers):
    s = servers(num_ps=1, workers=3)
    seen, orders = set(), []
    for w in range(3):
        client = fulcrum.connect(s.hosts, worker_id=w, num_replicas=3)
        dealer = fulcrum.data.Dealer(client, 100, batch_size=8, epochs=2, seed=7)
        assert dealer.steps_per_epoch == 4  # floor(100 / 3 / 8)
        batches = list(dealer)
        places = [(b.epoch, b.step_in_epoch) for b in batches]
        assert places == [(e, i) for e in range(2) for i in range(4)]
        first_epoch = np.concatenate([b.indices for b in batches[:4]])
        assert all(i % 3 == w for i in first_epoch)
        assert not seen & set(first_epoch.tolist())
        seen |= set(first_epoch.tolist())
        orders.append(first_epoch)
        second = np.concatenate([b.indices for b in batches[4:]])
        assert len(second) == 32 and all(i % 3 == w for i in second)
        assert second.tolist() != first_epoch.tolist()
    # The seed decides: the same dealing again gives the same order.
    again = fulcrum.data.Dealer(fulcrum.connect(s.hosts, worker_id=0, num_replicas=3), 100, 8, 1, 7)
    assert np.concatenate([b.indices for b in again]).tolist() == orders[0].tolist()


def test_a_restarted_worker_resumes_at_the_servers_step(servers):
    s = servers(mode="sync", num_ps=1, workers=1)
    client = fulcrum.connect(s.hosts, mode="sync")
    client.create_variables([counter_spec()])
    out = client.pull()
    for _ in range(5):
        client.push_pull({"v": np.ones(2, np.float32)}, out)
    restarted = fulcrum.connect(s.hosts, mode="sync")
    restarted.create_variables([counter_spec()])
    restarted.pull()
    dealer = fulcrum.data.Dealer(restarted, 100, batch_size=10, epochs=2, seed=1)
    assert dealer.resumed == 5
    batches = list(dealer)
    assert (batches[0].epoch, batches[0].step_in_epoch) == (0, 5)
    assert len(batches) == 20 - 5
    fresh = fulcrum.data.Dealer(restarted, 100, batch_size=10, epochs=2, seed=1, resume=False)
    assert [b.indices.tolist() for b in list(fresh)[5:]] == [b.indices.tolist() for b in batches]


def test_a_worker_gone_for_good_has_its_share_dealt_over_the_others(servers, caplog):
    s = servers(num_ps=1, workers=2, flags=["--lease_timeout_ms=300"])
    gone = fulcrum.connect(s.hosts, worker_id=1, num_replicas=2)
    gone.heartbeat()  # seen once, then silent: its lease runs out
    client = fulcrum.connect(s.hosts, worker_id=0, num_replicas=2)
    deadline = time.monotonic() + 30
    while any(w["live"] for w in client.describe()[0]["workers"][1:2]):
        assert time.monotonic() < deadline, "worker 1's lease never ran out"
        time.sleep(0.05)  # polling the servers' view of the lease
    dealer = fulcrum.data.Dealer(client, 40, batch_size=4, epochs=2, seed=3)
    batches = list(dealer)
    first = np.concatenate([b.indices for b in batches if b.epoch == 0])
    second = np.concatenate([b.indices for b in batches if b.epoch == 1])
    assert len(first) == 20 and all(i % 2 == 0 for i in first)  # its first share
    assert sorted(second.tolist()) == list(range(40))  # everything, once worker 1 is gone
    assert "worker(s) 1 gone for good" in caplog.text


def test_a_dealer_is_a_batch_sampler_for_torch(servers):
    s = servers(num_ps=1, workers=1)
    client = fulcrum.connect(s.hosts)
    features = torch.arange(30, dtype=torch.float32).reshape(30, 1)
    dataset = torch.utils.data.TensorDataset(features, features * 2)
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=fulcrum.data.Dealer(client, len(dataset), batch_size=6, seed=2)
    )
    batches = list(loader)
    assert len(batches) == 5
    x = torch.cat([b[0] for b in batches]).flatten()
    assert sorted(x.tolist()) == list(range(30))
    assert torch.equal(torch.cat([b[1] for b in batches]).flatten(), x * 2)


def test_a_read_only_client_or_bad_sizes_are_refused(servers):
    s = servers(num_ps=1, workers=1)
    with pytest.raises(fulcrum.InvalidArgument, match="read-only"):
        fulcrum.data.Dealer(fulcrum.connect(s.hosts, worker_id=-1), 10, 2)
    with pytest.raises(fulcrum.InvalidArgument, match="batch size 0"):
        fulcrum.data.Dealer(fulcrum.connect(s.hosts), 10, 0)


def test_load_gives_the_c_plus_plus_workers_data():
    sizes = dict(ctr_vocabulary=1000, ctr_train_examples=300, ctr_test_examples=200, seed=4)
    train = fulcrum.data.load("synthetic_ctr", "train", **sizes)
    assert train.features.shape == (300, 13) and train.ids.shape == (300, 26)
    assert set(np.unique(train.labels)) <= {0, 1} and 0.5 < train.oracle_auc <= 1.0
    test = fulcrum.data.load("synthetic_ctr", "test", feature_dim=13, **sizes)
    assert test.features.shape == (200, 13) and 0.5 < test.oracle_auc <= 1.0
    again = fulcrum.data.load("synthetic_ctr", "test", **sizes)  # learns the width itself
    assert np.array_equal(again.ids, test.ids)  # seeded: the same everywhere
    with pytest.raises(fulcrum.InvalidArgument, match="13 features, the training set 5"):
        fulcrum.data.load("synthetic_ctr", "test", feature_dim=5, **sizes)
    with pytest.raises(fulcrum.InvalidArgument, match="train or test"):
        fulcrum.data.load("synthetic_ctr", "validation", **sizes)


def write_numbered_criteo(path, n):
    """A Criteo file whose example i has i as its first integer field (read
    back as log(1 + i)) and i % 2 as its label."""
    with open(path, "w") as f:
        for i in range(n):
            f.write("\t".join([str(i % 2), str(i)] + [""] * 12 + ["%x" % i] * 26) + "\n")


def test_a_criteo_file_streams_dealt_as_in_memory_within_its_buffer(servers, tmp_path):
    write_numbered_criteo(tmp_path / "train.txt", 103)
    s = servers(num_ps=1, workers=3)
    seen = set()
    for w in range(3):
        client = fulcrum.connect(s.hosts, worker_id=w, num_replicas=3)
        stream = fulcrum.data.Stream(
            client, tmp_path, batch_size=8, epochs=2, seed=5, shuffle_buffer=10
        )
        assert stream.num_examples == 103 and stream.steps_per_epoch == 4
        batches = list(stream)
        places = [(b.epoch, b.step_in_epoch) for b in batches]
        assert places == [(e, i) for e in range(2) for i in range(4)]
        index = [np.rint(np.expm1(b.features[:, 0])).astype(np.int64) for b in batches]
        assert all((b.labels == i % 2).all() for b, i in zip(batches, index, strict=True))
        assert batches[0].ids.shape == (8, 26)
        first = np.concatenate(index[:4]).tolist()
        assert all(i % 3 == w for i in first)  # its own share, each once
        assert not seen & set(first) and len(set(first)) == 32
        seen |= set(first)
        # Mixed within the buffer: the p-th trained is among the share's first p + 10.
        assert all(i // 3 < p + 10 for p, i in enumerate(first))
        assert np.concatenate(index[4:]).tolist() != first  # another order next epoch
    # A line that is not a Criteo line is named before any batch.
    with open(tmp_path / "train.txt", "a") as f:
        f.write("1\t2\t3\n")
    with pytest.raises(fulcrum.InvalidArgument, match="train.txt:104"):
        fulcrum.data.Stream(fulcrum.connect(s.hosts, worker_id=0, num_replicas=3), tmp_path, 8)


def test_a_restarted_worker_resumes_a_stream_at_the_servers_step(servers, tmp_path):
    write_numbered_criteo(tmp_path / "train.txt", 100)
    s = servers(mode="sync", num_ps=1, workers=1)
    client = fulcrum.connect(s.hosts, mode="sync")
    client.create_variables([counter_spec()])
    out = client.pull()
    for _ in range(5):
        client.push_pull({"v": np.ones(2, np.float32)}, out)
    restarted = fulcrum.connect(s.hosts, mode="sync")
    restarted.create_variables([counter_spec()])
    restarted.pull()
    stream = fulcrum.data.Stream(restarted, tmp_path, batch_size=10, epochs=2, seed=1)
    assert stream.resumed == 5
    batches = list(stream)
    assert (batches[0].epoch, batches[0].step_in_epoch) == (0, 5)
    assert len(batches) == 20 - 5
    # The batches the first run would have trained from the 6th on.
    fresh = list(fulcrum.data.Stream(restarted, tmp_path, 10, 2, 1, resume=False))[5:]
    assert all(np.array_equal(a.features, b.features) for a, b in zip(fresh, batches, strict=True))
