"""Mirrors and exact-commit checkouts of real git repositories made in tmp_path."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gradci.worker.checkout import CheckoutError, Checkouts, auth_config


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": "/usr/bin:/bin",
                               "HOME": str(repo)}).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    first = commit(root, {"gradci.toml": "# one\n", "a.py": "A = 1\n"}, "first")
    second = commit(root, {"gradci.toml": "# two\n", "b.py": "B = 2\n"}, "second")
    return root, first, second


@pytest.mark.parametrize("as_url", [False, True])
def test_exact_commits_are_checked_out(repo: tuple[Path, str, str], tmp_path: Path, as_url: bool) -> None:
    root, first, second = repo
    source = f"file://{root}" if as_url else str(root)
    checkouts = Checkouts(tmp_path / "work")
    sha, tree = checkouts.checkout(source, first)
    assert sha == first
    assert (tree / "gradci.toml").read_text() == "# one\n"
    assert not (tree / "b.py").exists()
    sha, tree = checkouts.checkout(source, second)
    assert sha == second and (tree / "b.py").read_text() == "B = 2\n"
    assert tree == tmp_path / "work" / "checkouts" / second


def test_default_branch_ref_and_short_sha(repo: tuple[Path, str, str], tmp_path: Path) -> None:
    root, first, second = repo
    checkouts = Checkouts(tmp_path / "work")
    assert checkouts.resolve(str(root)) == second
    assert checkouts.resolve(str(root), "main") == second
    assert checkouts.resolve(str(root), first[:10]) == first


def test_a_new_commit_is_fetched_on_demand(repo: tuple[Path, str, str], tmp_path: Path) -> None:
    root, _, second = repo
    checkouts = Checkouts(tmp_path / "work")
    checkouts.checkout(str(root), second)
    third = commit(root, {"c.py": "C = 3\n"}, "third")
    sha, tree = checkouts.checkout(str(root), third)
    assert sha == third and (tree / "c.py").exists()


def test_an_unknown_sha_is_a_clear_error(repo: tuple[Path, str, str], tmp_path: Path) -> None:
    root, _, _ = repo
    missing = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(CheckoutError, match=f"commit '{missing}' does not exist in {root}"):
        Checkouts(tmp_path / "work").checkout(str(root), missing)


def test_a_missing_repository_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CheckoutError, match="git clone failed"):
        Checkouts(tmp_path / "work").checkout(str(tmp_path / "nowhere"), None)


def test_github_token_goes_in_a_header_for_github_only() -> None:
    assert auth_config("https://github.com/o/r.git", "tok")[0].startswith("http.extraHeader=Authorization: Basic ")
    assert auth_config("https://example.com/o/r.git", "tok") == []
    assert auth_config("https://github.com/o/r.git", None) == []
