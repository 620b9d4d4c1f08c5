"""The wheel: built from the assembled package, installed into a fresh
virtual environment of the system Python, imported and used there."""

import os
import subprocess
import sys

SOURCE = os.environ.get("FULCRUM_SOURCE_DIR", ".")
SITE = os.path.join(SOURCE, "python", "site")


def run(*args, **kwargs):
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=600, **kwargs)


def test_the_wheel_installs_into_a_fresh_venv_and_talks_to_a_server(servers, tmp_path):
    wheel = run(
        sys.executable,
        os.path.join(SOURCE, "python", "build_wheel.py"),
        "--site",
        SITE,
        "--out",
        str(tmp_path / "dist"),
    ).stdout.strip()
    assert os.path.basename(wheel) == "fulcrum-0.1.0-cp311-cp311-linux_x86_64.whl"
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv))
    # Outside the source tree and without PYTHONPATH: only the installed copy.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run(str(venv / "bin" / "pip"), "install", "-q", wheel, env=env)
    s = servers()
    script = (
        "import fulcrum, numpy as np; c = fulcrum.connect(%r);"
        "c.create_variables([fulcrum.variable('w', (3,), fulcrum.sgd(1.0))]);"
        "c.push({'w': np.ones(3, np.float32)});"
        "print(fulcrum.__file__, c.pull()['w'].tolist())"
    ) % s.hosts
    out = run(str(venv / "bin" / "python"), "-c", script, env=env, cwd=str(tmp_path)).stdout
    assert str(venv) in out and "[-1.0, -1.0, -1.0]" in out
