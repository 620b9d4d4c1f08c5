"""fulcrum.torch.Replica: a torch.nn.Module trained on the servers."""

import threading

import numpy as np
import pytest
import torch

import fulcrum
import fulcrum.torch


class Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.fc = torch.nn.Linear(4, 3)
        self.unused = torch.nn.Linear(2, 2)  # gets no gradient

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def batch(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(5, 1, 4, 3, generator=g), torch.randint(0, 3, (5,), generator=g)


def servers_values(hosts, model, mode="async"):
    """The servers' values of the model's variables, through a reader that
    creates the same specs in the same order (so they place the same)."""
    reader = fulcrum.connect(hosts, worker_id=-1, mode=mode)
    reader.create_variables(
        [fulcrum.variable(n, p.shape, fulcrum.sgd(0.1)) for n, p in model.named_parameters()]
    )
    return reader.pull()


def test_parameters_equal_the_servers_values_after_each_step(servers):
    s = servers(mode="async")
    model = Net(seed=1)
    client = fulcrum.connect(s.hosts)
    replica = fulcrum.torch.Replica(model, client, fulcrum.sgd(0.1))
    names = [n for n, _ in model.named_parameters()]
    assert set(replica.values) == set(names)
    storage = {n: p.data_ptr() for n, p in model.named_parameters()}
    for step in range(3):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        x, y = batch(step)
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        grads = {
            n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
            for n, p in model.named_parameters()
        }
        stats = replica.step()
        assert stats.applied > 0
        for n, p in model.named_parameters():
            assert p.data_ptr() == storage[n], "pulled into the parameter in place"
            np.testing.assert_allclose(
                p.detach().numpy(), (before[n] - 0.1 * grads[n]).numpy(), rtol=1e-5, atol=1e-6
            )
    on_servers = servers_values(s.hosts, model)
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), on_servers[n])


def test_the_chiefs_initial_values_win_and_workers_wait_for_them(servers):
    s = servers(mode="async", workers=2)
    chief_model, worker_model = Net(seed=1), Net(seed=2)
    assert not torch.equal(chief_model.fc.weight, worker_model.fc.weight)
    chief_values = {n: p.detach().clone() for n, p in chief_model.named_parameters()}
    made = {}
    # The worker starts first and waits for the chief to create the variables.
    worker_thread = threading.Thread(
        target=lambda: made.update(
            worker=fulcrum.torch.Replica(
                worker_model, fulcrum.connect(s.hosts, worker_id=1), fulcrum.sgd(0.1)
            )
        )
    )
    worker_thread.start()
    fulcrum.torch.Replica(chief_model, fulcrum.connect(s.hosts, worker_id=0), fulcrum.sgd(0.1))
    worker_thread.join(timeout=60)
    assert "worker" in made
    for n, p in worker_model.named_parameters():
        assert torch.equal(p.detach(), chief_values[n]), n


def test_non_float32_parameters_are_refused(servers):
    s = servers()
    model = torch.nn.Linear(2, 2).double()
    with pytest.raises(TypeError, match="weight' is torch.float64"):
        fulcrum.torch.Replica(model, fulcrum.connect(s.hosts), fulcrum.sgd(0.1))


def test_parameters_on_a_device_other_than_the_cpu_or_cuda_are_refused(servers):
    s = servers()
    model = torch.nn.Linear(2, 2, device="meta")
    with pytest.raises(TypeError, match="weight' is torch.float32 on meta.*CPU or a CUDA"):
        fulcrum.torch.Replica(model, fulcrum.connect(s.hosts), fulcrum.sgd(0.1))


def test_sync_replicas_step_together_and_match_the_servers(servers):
    s = servers(mode="sync", workers=2)
    models = [Net(seed=1), Net(seed=2)]
    replicas = [None, None]
    grads_seen = [None, None]

    def run(w):
        client = fulcrum.connect(s.hosts, worker_id=w, mode="sync")
        replicas[w] = fulcrum.torch.Replica(models[w], client, fulcrum.sgd(0.1))
        x, y = batch(10 + w)
        models[w].zero_grad()
        torch.nn.functional.cross_entropy(models[w](x), y).backward()
        grads_seen[w] = {
            n: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
            for n, p in models[w].named_parameters()
        }
        replicas[w].step()

    initial = {n: p.detach().clone() for n, p in models[0].named_parameters()}
    threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(r is not None for r in replicas)
    on_servers = servers_values(s.hosts, models[0], mode="sync")
    for n, _p in models[0].named_parameters():
        mean = (grads_seen[0][n] + grads_seen[1][n]) / 2
        # One step of the mean gradient from the chief's values (SGD, lr 0.1).
        np.testing.assert_allclose(
            on_servers[n], (initial[n] - 0.1 * mean).numpy(), rtol=1e-5, atol=1e-6
        )
        for m in models:
            np.testing.assert_array_equal(
                dict(m.named_parameters())[n].detach().numpy(), on_servers[n]
            )
