"""The sizes GitHub refuses beyond: what gradci writes to it is cut to fit, by whoever writes it."""
from __future__ import annotations

STATUS_DESCRIPTION_LIMIT = 140  # a commit status's description: GitHub answers 422 above this
COMMENT_BODY_LIMIT = 65536      # likewise for a comment's body
# GitHub asks integrations to space out the requests that write (its secondary rate limits: at least a
# second between writes, content creation limited per minute) and keeps at most 1,000 statuses per
# commit and context: a running run's failures so far go out at most this often and this many times.
PROGRESS_INTERVAL_S = 5.0
PROGRESS_UPDATES_MAX = 100
