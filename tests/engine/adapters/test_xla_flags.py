"""The XLA settings that make a check's many small CPU compilations fast reach XLA, the O0 ones only
where no NVIDIA GPU is, none that the installed jaxlib lacks (XLA would abort), and a user's own
XLA_FLAGS still win."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gradci.scenarios.adapters import xla_flags
from gradci.scenarios.adapters.xla_flags import CPU_ONLY_FLAGS, NO_GPU_FLAGS, apply_fast_compile_flags, known_to_xla

ROOT = Path(__file__).resolve().parents[3]


def test_flags_come_before_the_users_own_and_are_added_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xla_flags, "nvidia_gpu_present", lambda: False)
    env = {"XLA_FLAGS": "--xla_backend_optimization_level=2"}
    apply_fast_compile_flags(env)
    apply_fast_compile_flags(env)
    assert env["XLA_FLAGS"] == " ".join((*CPU_ONLY_FLAGS, *NO_GPU_FLAGS, "--xla_backend_optimization_level=2"))


def test_a_gpu_machine_keeps_its_optimised_gpu_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xla_flags, "nvidia_gpu_present", lambda: True)
    env: dict[str, str] = {}
    apply_fast_compile_flags(env)
    assert env["XLA_FLAGS"] == " ".join(CPU_ONLY_FLAGS)


def test_only_flags_the_installed_xla_has_are_given() -> None:
    assert known_to_xla((*CPU_ONLY_FLAGS, "--xla_cpu_no_such_flag_anywhere=1")) == CPU_ONLY_FLAGS


DUMP_ONE_PROGRAM = textwrap.dedent("""
    import sys
    from gradci.scenarios.adapters import get_framework
    get_framework("jax")  # what every jax cell does first
    import jax.numpy as jnp
    jnp.tanh(jnp.ones(3)).block_until_ready()
""")


def _compiled_options(tmp_path: Path, user_flags: str = "") -> str:
    """The debug options XLA compiled a program with, from its dump."""
    dump = tmp_path / "dump"
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump} {user_flags}".strip(), "GRADCI_JAX_CACHE_DIR": "off",
           "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", DUMP_ONE_PROGRAM], env=env, check=True, timeout=120)
    return next(dump.glob("*jit_tanh*debug_options")).read_text()


@pytest.mark.skipif(xla_flags.nvidia_gpu_present(), reason="the O0 settings apply only without an NVIDIA GPU")
@pytest.mark.slow
def test_the_settings_reach_xla_and_the_users_win(tmp_path: Path) -> None:
    ours = _compiled_options(tmp_path / "ours")
    assert "xla_cpu_use_fusion_emitters: false" in ours and "xla_backend_optimization_level: 0" in ours
    theirs = _compiled_options(tmp_path / "theirs", "--xla_backend_optimization_level=2")
    assert "xla_backend_optimization_level: 2" in theirs
