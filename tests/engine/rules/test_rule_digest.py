"""A rule method's source digest: what the service compares to tell a rule a pull request changed from
one it left alone (or only moved down its file)."""
from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from gradci.scenarios.rules.discovery import Rule, discover_rules

SOURCE = '''
import torch


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g
'''


def digests(root: Path, package: str, source: str) -> dict[str, str]:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "ops.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(root))
    try:
        importlib.import_module(f"{package}.ops")
        (rule,) = [r for r in discover_rules(root) if r.name == "Twice"]
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == package or n.startswith(f"{package}.")]:
            del sys.modules[name]
    assert Rule.from_dict(rule.to_dict()) == rule  # the digest travels with the rule
    return {method.name: method.digest for method in rule.methods}


def test_a_changed_body_changes_its_digest_and_a_moved_rule_keeps_it(tmp_path):
    base = digests(tmp_path / "a", "digest_a", SOURCE)
    moved = digests(tmp_path / "b", "digest_b", "\n\n# a comment above\n" + SOURCE)
    changed = digests(tmp_path / "c", "digest_c", SOURCE.replace("return 2 * g", "return g + g"))
    assert all(base.values()) and base == moved
    assert changed["forward"] == base["forward"] and changed["backward"] != base["backward"]
