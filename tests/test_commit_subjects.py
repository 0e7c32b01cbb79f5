"""make lint's check of commit subjects: a subject over 72 characters fails it, naming the commit."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_commit_subjects.py"
WHEN = "2026-12-05T10:00:00Z"  # after the rule began


def commit(repo: Path, subject: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_DATE": WHEN, "GIT_COMMITTER_DATE": WHEN, "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", subject, "-m", "why"], cwd=repo, env=env,
                   check=True)


def check(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT)], cwd=repo, capture_output=True, text=True, timeout=60)


def test_a_subject_over_72_characters_fails_and_72_pass(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    commit(tmp_path, "x" * 72)
    assert check(tmp_path).returncode == 0
    commit(tmp_path, "y" * 73)
    refused = check(tmp_path)
    assert refused.returncode == 1 and "subject of 73 characters" in refused.stderr


def test_outside_a_checkout_there_is_nothing_to_check(tmp_path: Path) -> None:
    assert check(tmp_path).returncode == 0
