"""Read access: who asks, what GitHub lets them see, and the one decision every read goes through.

Every read of runs, cells, reports and history goes through that decision.
"""
