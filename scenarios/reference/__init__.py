"""Float64 references: finite differences with Richardson extrapolation and error estimates
(scipy.differentiate), their stencils and shared evaluations, analytic references, the cache.
"""
