"""From results to a cell's status: the check itself, comparison with the reference under
tolerances, forward/reverse and CPU/GPU agreement, mutation culprits, repeats, warnings.
"""
