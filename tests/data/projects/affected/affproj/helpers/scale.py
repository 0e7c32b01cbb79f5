"""Two modules away from the scenarios: only the rule's backward reaches it."""

FACTOR = 1.0  # read by Scaled.backward without running a line of this file


def derivative_scale():
    return 2.0
