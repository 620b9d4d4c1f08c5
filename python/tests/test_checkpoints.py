"""A Python chief's checkpoints against real servers: saved, restored by
servers started again, with the program's own state; refused where they
cannot be."""

import numpy as np
import pytest
import torch

import fulcrum
import fulcrum.torch


def specs(name="w"):
    # Split over both servers.
    return [fulcrum.variable(name, (6, 2), fulcrum.adam(0.1), partitioner=fulcrum.fixed_shards(2))]


def train(client, steps, name="w"):
    out = client.pull(names=[name])
    for _ in range(steps):
        client.push_pull({name: np.ones((6, 2), np.float32)}, out)
    return out[name]


def test_a_checkpoint_and_its_state_come_back_with_the_servers(servers, tmp_path):
    ckpt = tmp_path / "ckpt"
    flags = ["--checkpoint_dir=%s" % ckpt]
    first = servers(mode="sync", num_ps=2, flags=flags)
    client = fulcrum.connect(first.hosts, mode="sync")
    client.create_variables(specs())
    checkpoints = fulcrum.Checkpoints(client, ckpt, every_steps=2)
    assert checkpoints.restored() is None  # a fresh job
    saved = train(client, 3).copy()
    rng = torch.get_rng_state()
    state = {"epoch": 1, "position": [3, "of", 9], "rng": rng, "mean": np.arange(4.0)}
    assert checkpoints.maybe_save(client.step, state)  # 3 steps since the start: due
    assert not checkpoints.maybe_save(client.step, lambda: pytest.fail("not due, not called"))
    train(client, 2)  # lost with the kill below
    first.stop()  # kill -9: no final files

    again = servers(mode="sync", num_ps=2, flags=flags)
    restarted = fulcrum.connect(again.hosts, mode="sync")
    restarted.create_variables(specs() + specs("reference"))
    assert np.array_equal(restarted.pull(names=["w"])["w"], saved)
    assert restarted.step == 3
    back = fulcrum.Checkpoints(restarted, ckpt).restored()
    assert back["epoch"] == 1 and back["position"] == [3, "of", 9]
    assert torch.equal(back["rng"], rng)
    assert np.array_equal(back["mean"], np.arange(4.0))
    # The Adam slots came back too: one more step is a fresh variable's fourth.
    assert np.allclose(train(restarted, 1), train(restarted, 4, "reference"))


def test_a_replicas_buffers_travel_in_the_state(servers, tmp_path):
    s = servers(num_ps=1, flags=["--checkpoint_dir=%s" % (tmp_path / "ckpt")])
    client = fulcrum.connect(s.hosts)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    replica = fulcrum.torch.Replica(model, client, fulcrum.sgd(0.1))
    model(torch.randn(8, 3))  # moves the running statistics
    state = replica.local_state()
    assert set(state) == {
        "buffer:1.running_mean",
        "buffer:1.running_var",
        "buffer:1.num_batches_tracked",
    }
    checkpoints = fulcrum.Checkpoints(client, tmp_path / "ckpt")
    checkpoints.save(client.step, state)
    other = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    fulcrum.torch.Replica(other, client, fulcrum.sgd(0.1)).load_local_state(
        {k: v.clone() for k, v in state.items()}
    )
    assert torch.equal(other[1].running_mean, model[1].running_mean)
    assert other[1].num_batches_tracked.item() == 1


def test_mistakes_are_refused_with_their_reason(servers, tmp_path):
    s = servers(num_ps=1, workers=2, flags=["--checkpoint_dir=%s" % (tmp_path / "ckpt")])
    worker = fulcrum.connect(s.hosts, worker_id=1, num_replicas=2)
    with pytest.raises(fulcrum.FailedPrecondition, match="only the chief"):
        fulcrum.Checkpoints(worker, tmp_path / "ckpt")
    chief = fulcrum.connect(s.hosts, num_replicas=2)
    with pytest.raises(fulcrum.InvalidArgument, match="keep >= 1"):
        fulcrum.Checkpoints(chief, tmp_path / "ckpt", keep=0)
    checkpoints = fulcrum.Checkpoints(chief, tmp_path / "ckpt")
    with pytest.raises(TypeError, match="state 'f'"):
        checkpoints.save(0, {"f": object()})
    no_dir = servers(num_ps=1)
    plain = fulcrum.Checkpoints(fulcrum.connect(no_dir.hosts), tmp_path / "other")
    with pytest.raises(fulcrum.FailedPrecondition, match="no --checkpoint_dir"):
        plain.save(0)
