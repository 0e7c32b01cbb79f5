"""The records every layer shares: the cell, the matrix, device names and requirements.

Standard library only (tests/test_architecture.py enforces it): the API process, the planner and
REST clients import these without numpy or a framework.
"""
