"""fulcrum.tensorflow against real servers and through the launcher, run with
the TensorFlow virtual environment's Python (bench/tf_venv.sh)."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import conftest
import keras
import numpy as np
import pytest
import tensorflow as tf

import fulcrum
import fulcrum.tensorflow
from fulcrum.tensorflow import data as tf_data


@pytest.mark.parametrize(
    "optimizer, kind, fields",
    [
        (lambda: keras.optimizers.SGD(0.1), "SGD", {"learning_rate": 0.1}),
        (
            lambda: keras.optimizers.SGD(0.1, momentum=0.8, nesterov=True),
            "MOMENTUM",
            {"momentum": 0.8, "nesterov": True},
        ),
        (
            lambda: keras.optimizers.Adam(0.002, beta_1=0.8, epsilon=1e-6),
            "ADAM",
            {"learning_rate": 0.002, "beta1": 0.8, "beta2": 0.999, "epsilon": 1e-6},
        ),
        (
            lambda: keras.optimizers.Adagrad(0.05),
            "ADAGRAD",
            {"initial_accumulator_value": 0.1, "epsilon": 1e-7},
        ),
        (
            lambda: keras.optimizers.Ftrl(0.05, l1_regularization_strength=0.01, beta=0.5),
            "FTRL",
            {"l1": 0.01, "l2": 0.0, "ftrl_beta": 0.5},
        ),
    ],
)
def test_keras_optimizers_map_to_the_servers_with_their_hyperparameters(optimizer, kind, fields):
    spec = fulcrum.tensorflow.server_optimizer(optimizer())
    assert spec["kind"] == kind
    for name, value in fields.items():
        assert spec[name] == pytest.approx(value), name


@pytest.mark.parametrize(
    "optimizer, named",
    [
        (lambda: keras.optimizers.AdamW(0.001), "weight_decay"),
        (lambda: keras.optimizers.RMSprop(0.001), "do not implement it"),
        (lambda: keras.optimizers.Adam(0.001, clipnorm=1.0), "clipnorm"),
        (lambda: keras.optimizers.SGD(0.1, global_clipnorm=1.0), "global_clipnorm"),
        (lambda: keras.optimizers.Adam(0.001, use_ema=True), "use_ema"),
        (lambda: keras.optimizers.Adam(0.001, amsgrad=True), "amsgrad"),
        (
            lambda: keras.optimizers.SGD(
                keras.optimizers.schedules.ExponentialDecay(0.1, 100, 0.9)
            ),
            "learning-rate schedule",
        ),
        (lambda: keras.optimizers.Ftrl(0.1, learning_rate_power=-0.3), "learning_rate_power"),
    ],
)
def test_what_the_servers_would_not_honour_is_refused_by_name(optimizer, named):
    with pytest.raises(ValueError) as e:
        fulcrum.tensorflow.server_optimizer(optimizer())
    assert named in str(e.value) and "Adam, Adagrad and Ftrl" in str(e.value)


def test_shares_of_a_dataset_are_disjoint_and_as_long_as_each_other():
    batches = tf.data.Dataset.range(100).batch(10)  # 10 batches over 3 workers
    shares = [list(tf_data.take_share(batches, r, 3).as_numpy_iterator()) for r in range(3)]
    assert [len(s) for s in shares] == [3, 3, 3]
    seen = np.concatenate([b for s in shares for b in s])
    assert len(seen) == len(set(seen.tolist())) == 90
    x, y = tf_data.share_for_fit((1, 3), np.arange(10), np.arange(10) * 2)
    assert x.tolist() == [1, 4, 7] and y.tolist() == [2, 8, 14]


def test_apply_gradients_eagerly_and_in_a_tf_function_update_the_servers(servers):
    s = servers(num_ps=2)
    strategy = fulcrum.tensorflow.ParameterServerStrategy(ps_hosts=s.hosts)
    with strategy.scope():
        w = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="w")
        optimizer = keras.optimizers.SGD(0.5)
    grad = tf.ones((3, 2))
    optimizer.apply_gradients([(grad, w)])
    expected = np.arange(6, dtype=np.float32).reshape(3, 2) - 0.5
    np.testing.assert_allclose(w.numpy(), expected)

    @tf.function
    def step(g):
        strategy.run(lambda: optimizer.apply_gradients([(g, w)]))

    step(grad * 2)
    expected -= 1.0
    np.testing.assert_allclose(w.numpy(), expected)
    np.testing.assert_allclose(strategy.client.pull()["w"], expected)  # the servers' value
    assert int(optimizer.iterations.numpy()) == 2
    # A plain tf.keras Embedding's sparse gradient is pushed dense.
    with strategy.scope():
        layer = keras.layers.Embedding(4, 2)
        layer.build((None,))
        sgd = keras.optimizers.SGD(1.0)
    before = layer.embeddings.numpy().copy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(tf.constant([1, 1, 3])))
    sgd.apply_gradients(
        zip(tape.gradient(loss, [layer.embeddings]), [layer.embeddings], strict=True)
    )
    moved = before - layer.embeddings.numpy()
    np.testing.assert_allclose(moved, [[0, 0], [2, 2], [0, 0], [1, 1]])
    strategy.finish()
    assert s.wait_exited(timeout=30) == [0, 0]  # the chief ended the job


def test_an_embedding_table_layer_pulls_its_rows_and_pushes_their_gradients(servers):
    s = servers(num_ps=2)
    strategy = fulcrum.tensorflow.ParameterServerStrategy(ps_hosts=s.hosts)
    with strategy.scope():
        layer = fulcrum.tensorflow.Embedding(3, table="t", optimizer=fulcrum.sgd(1.0))
        dense = tf.Variable(np.ones(3, np.float32), name="dense")
        optimizer = keras.optimizers.SGD(0.5)
    ids = tf.constant([[7, 2**40], [7, 5]], tf.int64)  # any int64 id, repeated

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            rows = layer(ids)  # [2, 2, 3]
            loss = tf.reduce_sum(rows * dense)
        variables = layer.trainable_variables + [dense]
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return rows

    before = step(ids).numpy()
    assert before.shape == (2, 2, 3)
    np.testing.assert_array_equal(before[0, 0], before[1, 0])  # one id, one row
    after = strategy.client.pull_rows("t", [7, 2**40, 5])
    # Row 7 was used twice: its gradient rows are summed (2 x dense), SGD 1.0.
    np.testing.assert_allclose(after[0], before[0, 0] - 2.0, rtol=1e-6)
    np.testing.assert_allclose(after[1], before[0, 1] - 1.0, rtol=1e-6)
    np.testing.assert_allclose(after[2], before[1, 1] - 1.0, rtol=1e-6)
    # The dense variable's own optimizer: d(loss)/d(dense) is the rows' sum.
    np.testing.assert_allclose(dense.numpy(), 1.0 - 0.5 * before.sum(axis=(0, 1)), rtol=1e-5)
    assert strategy.client.tables()["t"]["rows"] == 3
    # The anchor of the rows' gradient never reaches the servers.
    assert sorted(strategy.client.variables()) == ["dense"]
    strategy.finish()


PROGRAM = textwrap.dedent(
    """
    import sys, keras, numpy as np, tensorflow as tf, fulcrum.tensorflow
    strategy = fulcrum.tensorflow.ParameterServerStrategy(ps_hosts=sys.argv[1])
    with strategy.scope():
        v = tf.Variable(np.zeros(4, np.float32), name="v")
        opt = keras.optimizers.SGD(1.0)
    opt.apply_gradients([(tf.ones(4), v)])
    if sys.argv[2] == "crash":
        raise RuntimeError("the program fails")
    """
)


@pytest.mark.parametrize("ending", ["clean", "crash"])
def test_a_clean_exit_ends_the_job_and_a_crash_lets_the_lease_lapse(servers, tmp_path, ending):
    s = servers(num_ps=1, flags=["--lease_timeout_ms=60000"])
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    done = subprocess.run(
        [sys.executable, str(script), s.hosts, ending], capture_output=True, text=True, timeout=120
    )
    if ending == "clean":
        assert done.returncode == 0, done.stderr
        assert s.wait_exited(timeout=30) == [0]  # the chief said the job is done
        return
    assert done.returncode == 1 and "the program fails" in done.stderr
    reader = fulcrum.connect(s.hosts, worker_id=-1)
    (worker,) = reader.describe()[0]["workers"]
    assert not worker.get("finished") and s.procs[0].poll() is None


def test_the_environment_gives_the_security_settings_and_never_half_of_tls(tmp_path):
    token = tmp_path / "token"
    token.write_text("secret\n")
    control = tmp_path / "control"
    control.write_text("chief's\n")
    env = fulcrum.client.environment(
        {
            "FULCRUM_INSECURE": "1",
            "FULCRUM_AUTH_TOKEN_FILE": str(token),
            "FULCRUM_CONTROL_TOKEN_FILE": str(control),
            "FULCRUM_MODE": "sync",
        }
    )
    assert env == {
        "insecure": "1",
        "auth_token": "secret",
        "control_token": "chief's",
        "mode": "sync",
    }
    with pytest.raises(fulcrum.InvalidArgument, match="FULCRUM_TLS_KEY"):
        fulcrum.client.environment({"FULCRUM_TLS_CERT": "c.pem", "FULCRUM_TLS_CA": "ca.pem"})


def test_the_container_entrypoints_environment_gives_the_cluster(servers, monkeypatch):
    s = servers(mode="sync", num_ps=2, workers=2)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name, value in {
        "FULCRUM_PS_HOSTS": s.hosts,
        "FULCRUM_WORKER_HOSTS": "127.0.0.1:1",
        "FULCRUM_CHIEF_HOST": "127.0.0.1:2",
        "FULCRUM_TASK_TYPE": "worker",
        "FULCRUM_TASK_INDEX": "0",
    }.items():
        monkeypatch.setenv(name, value)
    client = fulcrum.connect()  # no arguments: the environment's cluster, the servers' mode
    assert (client.worker_id, client.num_replicas, client.mode) == (1, 2, "sync")
    assert client.addresses == s.hosts.split(",")


def cluster_flags(*flags, mode="sync", worker_flags=(), data=None):
    """The launcher's flags for 2 servers and 3 workers in `mode`, on small
    data."""
    return [
        "--num_ps=2",
        "--num_workers=3",
        "--mode=" + mode,
        *flags,
        "--",
        *(data or ["--train_examples=6000", "--test_examples=1000"]),
        *worker_flags,
    ]


def launch(program, summary, *flags, **options):
    """examples/`program` run to its end on cluster_flags' cluster."""
    return conftest.launch(program, summary, *cluster_flags(*flags, **options))


def test_the_guides_custom_loop_trains_through_the_launcher_over_tls(tmp_path):
    summary = tmp_path / "summary.json"
    done = launch("tf_custom_loop.py", summary, "--tls", worker_flags=["--epochs=2"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for w in range(3):
        assert "[worker %d] Epoch 2, Loss:" % w in done.stdout
    # Sync steps: every replica ends with the servers' same values.
    finals = {
        line.split()[-1] for line in done.stdout.splitlines() if "final test accuracy" in line
    }
    assert len(finals) == 1, done.stdout[-2000:]
    # Two epochs of 6,000 examples: it learned (chance is 0.1); one run
    # measured 0.691, so 0.7 was a coin toss.
    assert json.loads(summary.read_text())["test_accuracy"] > 0.6
    assert "mutual TLS" in done.stdout


def test_keras_fit_trains_each_workers_share_and_survives_a_server_killed(tmp_path):
    """Model.fit on every worker, the chief checkpointing every 10 steps;
    kill -9 a server once a checkpoint is complete: the launcher restarts
    it, it restores the checkpoint, and the job trains to its end."""
    summary = tmp_path / "summary.json"
    checkpoints = tmp_path / "checkpoints"
    argv = conftest.launcher_argv(
        "keras_fit.py",
        summary,
        *cluster_flags(
            "--insecure",
            "--checkpoint_dir=%s" % checkpoints,
            "--max_restarts=1",
            "--ps_args=--lease_timeout_ms=5000",
            worker_flags=["--epochs=2"],
        ),
    )
    code, out = run_killing(
        argv,
        conftest.launcher_env(FULCRUM_CHECKPOINT_EVERY_STEPS="10"),
        "ps 1",
        r"checkpoint ckpt-\d+ complete",
    )
    assert code == 0, out[-4000:]
    assert "[launcher] restarting ps 1 (restart 1 of 1)" in out
    assert "restoring from checkpoint" in out, out[-4000:]
    # 6000 examples in batches of 64: 93 whole batches, 31 for each worker,
    # every one of them trained in both epochs.
    for w in range(3):
        assert out.count("[worker %d] 31/31" % w) == 2, out[-4000:]
    assert json.loads(summary.read_text())["test_accuracy"] > 0.7


def test_a_keras_ctr_model_trains_its_fields_in_a_table_through_the_launcher(tmp_path):
    summary = tmp_path / "summary.json"
    data = ["--train_examples=60000", "--test_examples=10000", "--vocabulary=10000"]
    done = launch("keras_ctr.py", summary, "--insecure", mode="async", data=data)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(summary.read_text())
    # Far above chance on a tenth of the data; the full run's AUC is in
    # docs/tensorflow.md.
    assert result["test_auc"] > 0.75, result
    rows = int(done.stdout.split("chief: table rows ")[1].split()[0])
    assert rows > 10000  # ids of 26 fields, stored on the servers


@pytest.mark.parametrize("program", ["tf_custom_loop.py", "keras_fit.py"])
def test_the_guides_programs_train_by_all_reduce(tmp_path, program):
    summary = tmp_path / "summary.json"
    done = conftest.launch(
        program,
        summary,
        "--num_ps=0",
        "--strategy=multi_worker_mirrored",
        "--num_workers=3",
        "--",
        "--train_examples=6000",
        "--test_examples=1000",
        "--epochs=2",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "multi_worker_mirrored" in done.stdout
    # Far above chance (0.1) on a tenth of the data: two epochs of 6000
    # examples land around 0.7 (0.694 in one run), the full run's in
    # docs/tensorflow.md.
    assert json.loads(summary.read_text())["test_accuracy"] > 0.6


def test_an_all_reduce_job_started_again_resumes_from_its_chiefs_checkpoint(tmp_path):
    """Model.fit by all-reduce with --checkpoint_dir: the chief checkpoints
    its replica; the same job started again with more epochs restores it
    and fit goes on at the next epoch, not from the first."""
    checkpoints = tmp_path / "checkpoints"

    def run(epochs):
        return conftest.launch(
            "keras_fit.py",
            tmp_path / "summary.json",
            "--num_ps=0",
            "--strategy=multi_worker_mirrored",
            "--num_workers=2",
            "--insecure",
            "--checkpoint_dir=%s" % checkpoints,
            "--",
            "--train_examples=6000",
            "--test_examples=1000",
            "--epochs=%d" % epochs,
        )

    first = run(1)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # 6000 examples in batches of 64: 94 batches, 47 for each worker.
    assert list(checkpoints.glob("ckpt-*47/MANIFEST")), first.stdout[-3000:]
    first_accuracy = json.loads((tmp_path / "summary.json").read_text())["test_accuracy"]

    again = run(2)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    out = again.stdout
    assert "[worker 0] Epoch 2/2" in out and "Epoch 1/2" not in out, out[-3000:]
    restored = re.search(r"restored (\d+) variable\(s\) at step (\d+)", again.stdout)
    assert restored and restored.groups() == ("6", "47"), again.stdout[-3000:]
    assert list(checkpoints.glob("ckpt-*94/MANIFEST")), again.stdout[-3000:]
    # The second epoch trained on from the first's values.
    assert json.loads((tmp_path / "summary.json").read_text())["test_accuracy"] > max(
        first_accuracy - 0.02, 0.7
    )


def run_killing(argv, env, victim, after):
    """Runs the launcher `argv`, kills -9 its `victim` ("worker 2", "ps 1")
    once a line matches the regex `after`, and returns (the launcher's exit
    code, its output), having checked that the launcher started the victim
    again."""
    launcher = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines, pid, killed = [], None, False
    deadline = time.monotonic() + 600
    try:
        for line in launcher.stdout:
            lines.append(line)
            started = re.match(r"\[launcher\] started %s \(pid (\d+)\)" % victim, line)
            if started and pid is None:
                pid = int(started.group(1))
            if not killed and pid is not None and re.search(after, line):
                os.kill(pid, signal.SIGKILL)
                killed = True
            assert time.monotonic() < deadline, "".join(lines[-50:])
        code = launcher.wait(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    out = "".join(lines)
    assert killed, out[-4000:]
    assert len(re.findall(r"started %s \(pid" % victim, out)) == 2, out[-4000:]  # restarted
    return code, out


# Mid-run: the custom loop after its first epoch, fit as its first begins
# (a fit step is quicker: the restarted worker, which imports TensorFlow
# anew, must come back before the others have finished).
KILL_AFTER = {"tf_custom_loop.py": "Epoch 1,", "keras_fit.py": "Epoch 1/"}
TRAIN_EXAMPLES = {"tf_custom_loop.py": "12000", "keras_fit.py": "60000"}


@pytest.mark.parametrize("program", ["tf_custom_loop.py", "keras_fit.py"])
def test_all_reduce_training_survives_a_worker_killed_and_restarted(tmp_path, program):
    """kill -9 one of three all-reduce workers mid-run: the others go on
    without it; the launcher restarts it and it rejoins the group."""
    summary = tmp_path / "summary.json"
    argv = conftest.launcher_argv(
        program,
        summary,
        "--num_workers=3",
        "--num_ps=0",
        "--strategy=multi_worker_mirrored",
        "--insecure",
        "--max_restarts=1",
        "--",
        "--train_examples=" + TRAIN_EXAMPLES[program],
        "--test_examples=1000",
        "--epochs=4",
    )
    # The survivors notice the lost worker within 5 s, not the default 60.
    code, out = run_killing(
        argv,
        conftest.launcher_env(FULCRUM_COLLECTIVE_TIMEOUT_SECS="5"),
        "worker 2",
        r"^\[worker 2\] " + re.escape(KILL_AFTER[program]),
    )
    assert code == 0, out[-4000:]
    assert "rank(s) 2 joined" in out  # the group took it back
    # Every replica ends bit-identical, the restarted one among them.
    finals = re.findall(r"\[worker (\d)\] .*?(?:final test|Eval) accuracy:? (\S+)", out)
    assert sorted(w for w, _ in finals) == ["0", "1", "2"], out[-4000:]
    assert len({a for _, a in finals}) == 1, finals
    assert json.loads(summary.read_text())["test_accuracy"] > 0.7


def test_a_restarted_chief_resumes_where_the_parameter_server_job_is(tmp_path):
    """kill -9 the chief of the sync custom loop after its first epoch: the
    launcher restarts it, it starts from the servers' values (its own
    initial values do not win a second time), its training data resumes at
    the job's step, not at the first epoch, and it ends the job."""
    summary = tmp_path / "summary.json"
    argv = conftest.launcher_argv(
        "tf_custom_loop.py",
        summary,
        "--num_workers=3",
        "--num_ps=2",
        "--mode=sync",
        "--max_restarts=1",
        "--ps_args=--lease_timeout_ms=3000",
        "--",
        "--train_examples=12000",
        "--test_examples=1000",
        "--epochs=3",
    )
    code, out = run_killing(argv, conftest.launcher_env(), "worker 0", r"^\[worker 0\] Epoch 1,")
    assert code == 0, out[-4000:]
    first_loss = float(re.search(r"\[worker 0\] Epoch 1, Loss: ([0-9.]+)", out).group(1))
    restarted = out[out.rindex("started worker 0 (pid") :]
    # The job had trained its first epoch: the restarted chief's data
    # resumed after it, and it trained the last epoch to the end.
    resumed = re.search(
        r"\[worker 0\] the job is under way: .* batch (\d+) \(epoch (\d)", restarted
    )
    assert resumed and int(resumed.group(2)) >= 2, restarted[-3000:]
    last_loss = re.search(r"\[worker 0\] Epoch 3, Loss: ([0-9.]+)", restarted)
    assert last_loss and "[worker 0] final test" in restarted, restarted[-3000:]
    # Trained on from the servers' values, not from fresh initial values.
    assert float(last_loss.group(1)) < 0.9 * first_loss, (first_loss, last_loss.group(1))
    assert json.loads(summary.read_text())["test_accuracy"] > 0.7
