"""The examples, run as users run them, on small data."""

import json
import subprocess
import sys

import conftest
import pytest
from conftest import example


def test_numpy_linear_learns_the_true_weights(servers):
    s = servers(num_ps=1)
    done = subprocess.run(
        [sys.executable, example("numpy_linear.py"), "--ps_hosts=" + s.hosts, "--insecure"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "step 0 loss" in done.stdout and "final max weight error" in done.stdout
    assert s.wait_exited(timeout=30) == [0]  # the chief ended the job


def test_numpy_linear_takes_the_daemons_host_flags_as_a_chief_and_a_worker(servers):
    """As the container image's entrypoint runs it: the host flags, sync."""
    s = servers(mode="sync", num_ps=1, workers=2)
    hosts = ["--ps_hosts=" + s.hosts, "--chief_host=127.0.0.1:1", "--worker_hosts=127.0.0.1:2"]
    procs = [
        subprocess.Popen(
            [sys.executable, example("numpy_linear.py"), "--mode=sync", "--insecure"]
            + hosts
            + ["--task_type=" + task, "--task_index=0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for task in ("chief", "worker")
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    assert "final max weight error" in outputs[0]
    assert s.wait_exited(timeout=30) == [0]


def launch(name, mode, summary, *flags, worker_flags=()):
    """examples/`name` as every worker of a launcher run (2 servers, 3
    workers in `mode`), which finds the package itself: no PYTHONPATH."""
    return conftest.launch(
        name,
        summary,
        "--num_ps=2",
        "--num_workers=3",
        "--mode=" + mode,
        *flags,
        "--",
        *worker_flags,
    )


def test_torch_fashion_mnist_trains_through_the_launcher(tmp_path):
    summary = tmp_path / "summary.json"
    metrics = tmp_path / "metrics.jsonl"
    done = launch(
        "torch_fashion_mnist.py",
        "sync",
        summary,
        "--metrics_jsonl=%s" % metrics,
        worker_flags=["--epochs=2", "--train_examples=6000", "--test_examples=1000"],
    )
    assert done.returncode == 0, done.stdout[-4000:]
    result = json.loads(summary.read_text())
    for key in (
        "test_accuracy",
        "examples_per_sec",
        "test_loss",
        "global_steps",
        "mode",
        "num_workers",
    ):
        assert key in result
    assert result["num_workers"] == 3 and result["mode"] == "sync"
    assert result["global_steps"] == 2 * (6000 // 3 // 64)  # every sync step, once
    assert result["test_accuracy"] > 0.7  # 2 epochs of 6,000 examples
    assert len(metrics.read_text().splitlines()) == 2
    for w in range(3):
        assert "[worker %d]" % w in done.stdout and "epoch 2/2" in done.stdout


def test_torch_example_flag_mistakes_are_usage_errors():
    done = subprocess.run(
        [sys.executable, example("torch_fashion_mnist.py"), "--strategy=multi_worker_mirrored"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "trains on parameter servers" in done.stderr


# DLRM's dot products, and the C++ CTR model's rows side by side.
@pytest.mark.parametrize("interaction", [["--interaction=dot"], ["--interaction=cat", "--bottom="]])
def test_torch_ctr_learns_clicks_through_the_launcher(tmp_path, interaction):
    summary = tmp_path / "summary.json"
    done = launch(
        "torch_ctr.py",
        "async",
        summary,
        worker_flags=[
            "--ctr_train_examples=150000",
            "--epochs=1",
            "--embedding_max_rows=5000",
            *interaction,
        ],
    )
    assert done.returncode == 0, done.stdout[-4000:]
    result = json.loads(summary.read_text())
    # Untrained is 0.5 and the data's best about 0.9: the C++ CTR model's bar.
    assert result["test_auc"] > 0.82, result
    assert result["test_auc"] < result["ground_truth_auc"] + 0.01
    assert "embedding table 'embeddings.field_0': 5000 rows of 5000" in done.stdout
