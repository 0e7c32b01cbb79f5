"""The framework conformance family as a repository of its own, for the affected-cells bench.

A built-in family has no project files: its scenarios are gradci's, so any change of gradci's source
re-runs all of it (by the environment's digest) and no pull request can change one of its rules.
``make_repository(root)`` copies the family's modules (``gradci.scenarios.library.conformance``, all
but torch's modules, a family of their own, with the helpers they share) into a new git repository
as the package ``conformance``, with a gradci.toml naming it, and commits it: the same scenarios,
names, input points and expectations, now the project's code, as a team keeping such a suite would
have it. ``change_one_rule`` and ``change_docs`` then commit the two kinds of pull request the bench
times:

- one rule: the family's own derivative rules are those it hands to jax.lax, which differentiates
  the solve through them — the transpose solve of ``custom_linear_solve`` (what reverse mode runs)
  and the tangent solve of ``custom_root``; the edit is of the former, a no-op in value;
- docs: a README line.

The frameworks' own rules (torch's derivatives.yaml, jax's primitives) are not the repository's: a
new torch or jax version re-runs every cell by the environment's digest, as it should.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bench.affected_project import commit, replace_once
from gradci.scenarios import library
from gradci.scenarios.library import conformance

PACKAGE = "conformance"
RULE_FILE = f"{PACKAGE}/jax_lax.py"

CONFIG = f'''\
[scenarios]
modules = ["{PACKAGE}"]
'''


def make_repository(root: Path) -> str:
    """A git repository at ``root``: the conformance family's modules as its own package; the commit's sha."""
    package = root / PACKAGE
    source = Path(conformance.__file__).resolve().parent
    shutil.copytree(source, package, ignore=shutil.ignore_patterns("__pycache__", "torch_modules.py"))
    shutil.copy(Path(library.__file__).resolve().parent / "_common.py", package / "_common.py")
    for path in package.glob("*.py"):
        text = path.read_text()
        text = text.replace("gradci.scenarios.library.conformance", PACKAGE)
        text = text.replace("gradci.scenarios.library._common", f"{PACKAGE}._common")
        path.write_text(text)
    (root / "gradci.toml").write_text(CONFIG)
    (root / "README.md").write_text("# Conformance\n\nThe frameworks' public functions under every operator "
                                    "(a copy of gradci's conformance family, for gradci's bench).\n")
    subprocess.run(["git", "-C", str(root), "init", "-q", "-b", "main"], check=True, capture_output=True)
    return commit(root, "the conformance family as a repository")


def change_one_rule(root: Path, number: int | str = 0) -> str:
    """Edit custom_linear_solve's transpose solve (a no-op in value, a change in code): its cells must re-run.

    ``number`` makes each such commit a commit of its own.
    """
    anchor = "    def transpose_solve(vecmat, b):\n        return jnp.linalg.solve(a.T, b)\n"
    replace_once(root / RULE_FILE, anchor, anchor.replace("(a.T, b)", f"(a.T, b * 1.0)  # {number}"),
                 "the conformance family's transpose solve")
    return commit(root, f"custom_linear_solve: scale the transpose solve's input (a no-op, {number})")


def change_docs(root: Path, number: int = 0) -> str:
    with (root / "README.md").open("a") as readme:
        readme.write(f"\nSee docs/what-is-checked.md for what the cells found ({number}).\n")
    return commit(root, f"README: a line ({number})")


def scenario_count() -> int:
    """How many scenarios the copy holds: the built-in family's."""
    return len(conformance.scenarios())

