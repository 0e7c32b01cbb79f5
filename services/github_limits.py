"""The sizes GitHub refuses beyond: what gradci writes to it is cut to fit, by whoever writes it."""
from __future__ import annotations

STATUS_DESCRIPTION_LIMIT = 140  # a commit status's description: GitHub answers 422 above this
COMMENT_BODY_LIMIT = 65536      # likewise for a comment's body
