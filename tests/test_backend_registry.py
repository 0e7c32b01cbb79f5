"""Third-party backends register through the ``gradci.backends`` entry-point group."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_entry_point_backend_is_listed_and_runs(tmp_path):
    dist = tmp_path / "thirdparty_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gradci.backends]\ndoubled = thirdparty_backend:make\n")
    (tmp_path / "thirdparty_backend.py").write_text(textwrap.dedent('''
        from scenarios.backends.torch_backends import TorchFuncBackend

        def make():
            return TorchFuncBackend("my-torch-rev", "reverse")
    '''))
    program = textwrap.dedent('''
        import numpy as np, scenarios
        from scenarios import Scenario, namespace
        assert "my-torch-rev" in scenarios.BACKENDS, scenarios.BACKENDS
        s = Scenario("sq", "gradient", lambda x: namespace(x).sum(x * x), np.array([1.0, 2.0]))
        report = scenarios.check([s], backends=["my-torch-rev"], devices=["cpu"], dtypes=["float64"])
        print(report.cells[0].status)
    ''')
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pass"
