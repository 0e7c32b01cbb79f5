"""From results to a cell's status.

Comparison with the reference under tolerances, forward/reverse and CPU/GPU agreement, mutation
culprits, repeats, warnings. The driver that runs a cell through them is ``gradci.scenarios.check``,
the floor above.
"""
