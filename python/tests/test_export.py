"""The trained model, taken out: a module trained through fulcrum.torch is
exported (fulcrumctl export, fulcrum.load_checkpoint, or client.export from
the live servers) and loaded into a fresh module in plain PyTorch, bit for
bit; tables come out as ids and rows, and can be listed and read whole."""

import subprocess

import numpy as np
import pytest
import safetensors.torch
import torch
from conftest import binary

import fulcrum
import fulcrum.torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def export(ckpt, out, *flags):
    done = subprocess.run(
        [binary("deploy/fulcrumctl"), "export", "--checkpoint_dir=%s" % ckpt, "--out=%s" % out]
        + list(flags),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def trained(servers, tmp_path, steps=20):
    """A Net trained on 2 servers whose job then ended: its final values."""
    ckpt = tmp_path / "ckpt"
    s = servers(num_ps=2, flags=["--checkpoint_dir=%s" % ckpt])
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    with fulcrum.connect(s.hosts) as client:
        replica = fulcrum.torch.Replica(model, client, fulcrum.adam(0.01))
        client.create_tables([fulcrum.table("emb", 2, fulcrum.sgd(1.0))])
        client.push_rows("emb", [5, 1000000007], np.ones((2, 2), np.float32))
        for _ in range(steps):
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            replica.step()
        replica.pull()
    assert s.wait_exited() == [0, 0]  # job done: each wrote its final file
    return ckpt, model, x


def test_an_exported_model_loads_into_plain_pytorch_bit_for_bit(servers, tmp_path):
    ckpt, model, x = trained(servers, tmp_path)
    out = tmp_path / "model.safetensors"
    printed = export(ckpt, out)
    assert "the servers' final checkpoint files (2 files)" in printed
    loaded = safetensors.torch.load_file(str(out))
    fresh = Net()
    fresh.load_state_dict({k: v for k, v in loaded.items() if not k.startswith("emb.")})
    for name, p in model.named_parameters():
        assert torch.equal(dict(fresh.named_parameters())[name], p), name
    assert torch.equal(fresh(x), model(x))  # so the same accuracy, on any data
    # The table: its ids and their rows, in one order.
    order = loaded["emb.ids"].argsort()
    assert loaded["emb.ids"][order].tolist() == [5, 1000000007]
    assert torch.equal(loaded["emb.rows"][order], torch.full((2, 2), -1.0))


def test_live_servers_export_what_they_hold_and_tables_read_whole(servers, tmp_path):
    s = servers(mode="sync", num_ps=2)
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    ids = np.arange(0, 3000 * 7919, 7919, dtype=np.int64)  # over both servers
    with fulcrum.connect(s.hosts, mode="sync") as client:
        replica = fulcrum.torch.Replica(model, client, fulcrum.adam(0.01))
        client.create_tables([fulcrum.table("emb", 3, fulcrum.adagrad(0.5))])
        for step in range(5):
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            client.pull_rows("emb", ids[step::2])  # sync: the step they are computed at
            client.push_rows("emb", ids[step::2], np.ones((len(ids[step::2]), 3), np.float32))
            replica.step()
        replica.pull()
        listed = client.tables()
        assert listed["emb"]["rows"] == len(ids) and listed["emb"]["width"] == 3
        table_ids, rows, slots = client.read_table("emb", slots=True)
        assert sorted(table_ids.tolist()) == ids.tolist()
        assert rows.shape == (len(ids), 3) and slots.shape == (len(ids), 3)
        assert np.array_equal(rows, client.pull_rows("emb", table_ids))
        summary = client.export(tmp_path / "live.safetensors")
        assert summary["format"] == "safetensors" and summary["tensors"] == 6
        client.export(tmp_path / "live.npz")
        with pytest.raises(fulcrum.NotFound, match="'nope'"):
            client.read_table("nope")
        with pytest.raises(fulcrum.InvalidArgument, match="one of safetensors or npz"):
            client.export(tmp_path / "x", format="onnx")
    loaded = safetensors.torch.load_file(str(tmp_path / "live.safetensors"))
    fresh = Net()
    fresh.load_state_dict({k: v for k, v in loaded.items() if not k.startswith("emb.")})
    for name, p in model.named_parameters():
        assert torch.equal(dict(fresh.named_parameters())[name], p), name
    order = np.argsort(table_ids)
    exported_order = loaded["emb.ids"].argsort()
    assert torch.equal(loaded["emb.ids"][exported_order], torch.from_numpy(table_ids[order]))
    assert torch.equal(loaded["emb.rows"][exported_order], torch.from_numpy(rows[order]))
    arrays = np.load(tmp_path / "live.npz")
    assert sorted(arrays.files) == sorted(loaded)
    assert np.array_equal(arrays["fc1.weight"], loaded["fc1.weight"].numpy())


def test_npz_load_checkpoint_and_slots_hold_the_same(servers, tmp_path):
    ckpt, model, _ = trained(servers, tmp_path, steps=3)
    export(ckpt, tmp_path / "model.npz")
    arrays = np.load(tmp_path / "model.npz")
    loaded = fulcrum.load_checkpoint(ckpt)
    assert sorted(arrays.files) == sorted(loaded)
    for name, p in model.named_parameters():
        assert np.array_equal(arrays[name], p.detach().numpy())
        assert np.array_equal(loaded[name], p.detach().numpy())
    with_slots = fulcrum.load_checkpoint(ckpt, slots=True)
    assert with_slots["fc1.weight.slot0"].shape == (8, 4)  # Adam's m
    assert with_slots["fc1.weight.slot1"].min() >= 0  # and v
    export(ckpt, tmp_path / "slots.safetensors", "--slots")
    assert "fc2.bias.slot1" in safetensors.torch.load_file(str(tmp_path / "slots.safetensors"))


def test_exporting_nothing_or_badly_is_refused_saying_why(tmp_path):
    with pytest.raises(fulcrum.NotFound, match="no complete checkpoint"):
        fulcrum.load_checkpoint(tmp_path)
    done = subprocess.run(
        [
            binary("deploy/fulcrumctl"),
            "export",
            "--checkpoint_dir=%s" % tmp_path,
            "--out=x.bin",
            "--format=onnx",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "safetensors or npz" in done.stderr
