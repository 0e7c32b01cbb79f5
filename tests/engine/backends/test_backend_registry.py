"""Third-party backends register through the ``gradci.backends`` entry-point group."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def run_with_backend(tmp_path: Path, make_body: str, program: str) -> subprocess.CompletedProcess[str]:
    """Run ``program`` in a fresh interpreter where a package registers the backend ``make_body`` makes."""
    dist = tmp_path / "thirdparty_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gradci.backends]\ndoubled = thirdparty_backend:make\n")
    (tmp_path / "thirdparty_backend.py").write_text(textwrap.dedent(make_body))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(program)], capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})


def test_entry_point_backend_is_listed_and_runs(tmp_path):
    out = run_with_backend(tmp_path, '''
        from gradci.scenarios.backends.torch_backends import TorchFuncBackend

        def make():
            return TorchFuncBackend("my-torch-rev", "reverse")
    ''', '''
        import numpy as np, gradci
        from gradci import Scenario, namespace
        assert "my-torch-rev" in gradci.backend_names(), gradci.backend_names()
        s = Scenario("sq", "gradient", lambda x: namespace(x).sum(x * x), np.array([1.0, 2.0]))
        report = gradci.check([s], backends=["my-torch-rev"], devices=["cpu"], dtypes=["float64"])
        print(report.cells[0].status)
    ''')
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pass"


def test_a_backend_outside_the_cell_vocabularies_is_refused_at_registration(tmp_path):
    """Its cells could never be stored: say so when it registers, not when a run ingests them."""
    out = run_with_backend(tmp_path, '''
        from gradci.scenarios.backends.base import Backend

        class TensorFlowBackend(Backend):
            name, framework, mode = "tf-rev", "tensorflow", "reverse"

        def make():
            return TensorFlowBackend()
    ''', '''
        import gradci
        gradci.backend_names()
    ''')
    assert out.returncode != 0
    assert "backend 'tf-rev': framework 'tensorflow' is not one of jax, torch, numpy" in out.stderr
