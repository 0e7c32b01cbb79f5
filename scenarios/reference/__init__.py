"""Float64 references.

Finite differences with Richardson extrapolation and error estimates (scipy.differentiate), their
stencils and shared evaluations, analytic references, the cache.
"""
