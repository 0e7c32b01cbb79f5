"""The engine's numeric records, below everything that computes.

What a scenario's inputs may be and what is kept of them, the precision a cell runs with, what a
reference is, and the default tolerances.
"""
