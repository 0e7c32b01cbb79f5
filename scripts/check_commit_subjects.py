"""Commit subjects fit one line of `git log --oneline`: at most 72 characters (make lint runs this).

The rule holds from the day it was made (RULE_SINCE) on; the reasoning goes in the body. Outside a
git checkout (a source archive) there is nothing to check.
"""
from __future__ import annotations

import subprocess
import sys

LIMIT = 72
RULE_SINCE = "2026-12-04T00:00:00Z"  # commits before it keep the subjects they were written with


def main() -> int:
    try:
        log = subprocess.run(["git", "log", f"--since={RULE_SINCE}", "--format=%h %s"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        print("commit subjects: not a git checkout, nothing to check")
        return 0
    long = [line for line in log.splitlines() if len(line.split(" ", 1)[-1]) > LIMIT]
    for line in long:
        sha, subject = line.split(" ", 1)
        print(f"{sha}: subject of {len(subject)} characters (at most {LIMIT}; the reasoning goes in the body): "
              f"{subject}", file=sys.stderr)
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
