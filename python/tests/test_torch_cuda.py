"""fulcrum.torch with CUDA parameters and ids: the values and gradients go
through pinned host copies. These tests need a CUDA-built torch and a GPU;
they are skipped elsewhere (Debian's python3-torch has no CUDA)."""

import numpy as np
import pytest
import torch

import fulcrum
import fulcrum.torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def servers_values(hosts, model):
    reader = fulcrum.connect(hosts, worker_id=-1)
    reader.create_variables(
        [fulcrum.variable(n, p.shape, fulcrum.sgd(0.1)) for n, p in model.named_parameters()]
    )
    return reader.pull()


def mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 3),
    )


def test_cuda_parameters_push_their_gradients_and_take_the_servers_values(servers):
    s = servers()
    model = mlp(seed=1).cuda()
    replica = fulcrum.torch.Replica(model, fulcrum.connect(s.hosts), fulcrum.sgd(0.1))
    storage = {n: p.data_ptr() for n, p in model.named_parameters()}
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        x, y = torch.randn(32, 8, generator=g).cuda(), torch.randint(0, 3, (32,), generator=g)
        before = {n: p.detach().cpu() for n, p in model.named_parameters()}
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y.cuda()).backward()
        # Clipped in place after the backward pass's copies began: what is
        # pushed is the clipped gradient.
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters()}
        replica.step()
        for n, p in model.named_parameters():
            assert p.data_ptr() == storage[n], "pulled into the CUDA parameter in place"
            np.testing.assert_allclose(
                p.detach().cpu().numpy(),
                (before[n] - 0.1 * grads[n]).numpy(),
                rtol=1e-5,
                atol=1e-6,
            )
    on_servers = servers_values(s.hosts, model)
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(p.detach().cpu().numpy(), on_servers[n])


def test_a_cuda_module_trains_as_its_cpu_twin(servers):
    """The same steps on a CUDA replica and a CPU one give the same values
    (to the GEMMs' rounding): the staging changes nothing but where."""
    s = servers(num_ps=1)
    t = servers(num_ps=1)
    cuda_model, cpu_model = mlp(seed=2).cuda(), mlp(seed=2)
    cuda = fulcrum.torch.Replica(cuda_model, fulcrum.connect(s.hosts), fulcrum.adam(1e-2))
    cpu = fulcrum.torch.Replica(cpu_model, fulcrum.connect(t.hosts), fulcrum.adam(1e-2))
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        x, y = torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)
        for model, replica, device in ((cuda_model, cuda, "cuda"), (cpu_model, cpu, "cpu")):
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
            replica.step()
    for a, b in zip(cuda_model.parameters(), cpu_model.parameters(), strict=True):
        np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().numpy(), atol=1e-4)


def test_embedding_bags_take_cuda_ids_and_give_cuda_rows(servers):
    s = servers()
    bag = fulcrum.torch.EmbeddingBag(4, mode="sum", name="emb")
    model = torch.nn.Sequential(bag)
    replica = fulcrum.torch.Replica(model, fulcrum.connect(s.hosts), fulcrum.sgd(1.0))
    ids = torch.tensor([[3, 7], [7, 2**40]], device="cuda")
    pooled = model(ids)
    assert pooled.device.type == "cuda"
    before = replica.client.pull_rows("emb", np.array([3, 7, 2**40]))
    pooled.sum().backward()
    replica.step()
    after = replica.client.pull_rows("emb", np.array([3, 7, 2**40]))
    # d(sum)/d(row) is each row's count in the batch: 1, 2, 1.
    np.testing.assert_allclose(before - after, np.array([[1.0], [2.0], [1.0]]) * np.ones(4))
