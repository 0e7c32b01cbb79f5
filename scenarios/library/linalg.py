"""Linear algebra: solve, inverse, determinants, factorizations and spectra on well-conditioned matrices.

Matrices are built inside f from an unconstrained x (A = x xᵀ + n I, or a symmetrised x plus a spread
diagonal) so finite differences may perturb x in any direction without leaving the domain: a
perturbed SPD matrix stays SPD, and perturbed eigenvalues stay distinct.
Factorizations whose factors are only unique up to signs (eigenvectors, QR) are checked through
sign-invariant functions of them.
"""
from __future__ import annotations

import array_api_compat
import numpy as np

from gradci.scenarios.authoring.namespace import namespace
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library._common import eye_like, operator_tags, rng, scenario_name

FAMILY = "linalg"
N = 3
# torch's JVP rules for det, slogdet and solve use the LU saved from the primal as a constant, so
# differentiating them again — forward over forward, or reverse over forward — drops the d(A^-1)
# term: a silent upstream bug.
_NESTED_JVP_BUG = ("torch nested forward AD through linalg.det/slogdet/solve drops the d(A^-1) term "
                   "(pytorch/pytorch#192540)")
TORCH_NESTED_JVP = {"torch-func-fwd": _NESTED_JVP_BUG, "torch-func-rev-fwd": _NESTED_JVP_BUG}


def spd(x):
    """x xᵀ + n I: symmetric, eigenvalues at least n."""
    xp = namespace(x)
    return x @ xp.matrix_transpose(x) + x.shape[-1] * eye_like(x.shape[-1], x)


def spread_symmetric(x):
    """Symmetrised x plus diag(0, 4, 8, ...): eigenvalues stay well apart for x of order 1."""
    xp = namespace(x)
    n = x.shape[-1]
    ramp = 4.0 * xp.arange(n, dtype=x.dtype, device=array_api_compat.device(x))
    return (x + xp.matrix_transpose(x)) / 2 + eye_like(n, x) * ramp


def solve_sum(x, b):
    xp = namespace(x)
    return xp.sum(xp.linalg.solve(spd(x), b) * b)


def solve_rhs(x, a):
    xp = namespace(x)
    return xp.linalg.solve(a, xp.sin(x))


def inverse(x):
    xp = namespace(x)
    # SPD plus skew-symmetric: not symmetric, yet every eigenvalue has real part at least n.
    return xp.linalg.inv(spd(x) + (x - xp.matrix_transpose(x)) / 2)


def det(x):
    xp = namespace(x)
    return xp.linalg.det(spd(x))


def logdet(x):
    xp = namespace(x)
    return xp.linalg.slogdet(spd(x)).logabsdet


def cholesky(x):
    xp = namespace(x)
    return xp.linalg.cholesky(spd(x))


def cholesky_energy(x, w):
    xp = namespace(x)
    return xp.sum(xp.linalg.cholesky(spd(x)) * w)


def eigenvalues(x, w):
    xp = namespace(x)
    return xp.sum(xp.linalg.eigvalsh(spread_symmetric(x)) * w)


def eigenvectors(x, w):
    # Squared entries do not see the sign LAPACK picks for each eigenvector.
    xp = namespace(x)
    return xp.sum(xp.linalg.eigh(spread_symmetric(x)).eigenvectors ** 2 * w)


def singular_values(x, w):
    xp = namespace(x)
    return xp.sum(xp.linalg.svdvals(x) * w)


def qr_invariant(x):
    # Rows of R and columns of Q flip sign together; their squares do not.
    xp = namespace(x)
    q, r = xp.linalg.qr(x)
    return xp.sum(r ** 2 * xp.tanh(r ** 2)) + xp.sum(q[:, 0] ** 2 * xp.sin(x[:, 0]))


def matrix_power(x):
    xp = namespace(x)
    return xp.linalg.matrix_power(x / 2, 3)


def norms(x):
    xp = namespace(x)
    return (xp.linalg.vector_norm(x) + xp.linalg.matrix_norm(x, ord="fro") ** 2
            + xp.linalg.vector_norm(x, ord=3, axis=0)[0])


def trace_products(x, a):
    xp = namespace(x)
    return xp.linalg.trace(x @ a @ x) + xp.sum(xp.linalg.outer(x[0], x[1])) + xp.linalg.vecdot(x[0], x[2])


def matrix_exp(framework):
    """expm is outside the array API: each framework's own, same math."""

    def torch_expm(x):
        import torch

        return torch.sum(torch.linalg.matrix_exp(x / 2) ** 2)

    def jax_expm(x):
        import jax.numpy as jnp
        import jax.scipy.linalg

        return jnp.sum(jax.scipy.linalg.expm(x / 2) ** 2)

    def numpy_expm(x):
        import scipy.linalg

        return np.sum(scipy.linalg.expm(x / 2) ** 2)

    return {"torch": torch_expm, "jax": jax_expm, "numpy": numpy_expm}[framework]


def _draws():
    g = rng(FAMILY)
    square = g.normal(size=(N, N))
    return {
        "square": square,
        # Singular values near 3, 2, 1: distinct and away from zero.
        "rect": np.vstack([np.diag([3.0, 2.0, 1.0]), np.zeros((1, N))]) + 0.3 * g.normal(size=(4, N)),
        "vector": g.normal(size=N),
        "spd": spd(g.normal(size=(N, N))),
        "weights": g.normal(size=(N, N)),
        "ramp": g.normal(size=N),
        "rhs": g.normal(size=(N, 2)),
    }


def scenarios() -> list[Scenario]:
    d = _draws()
    expm = {fw: matrix_exp(fw) for fw in ("torch", "jax", "numpy")}
    # (what, function, x, contexts, operators); expected failures per operator below
    table = [
        ("solve", solve_sum, d["square"], (d["rhs"],), ("gradient", "hvp", "jvp")),
        ("solve-rhs", solve_rhs, d["vector"], (d["spd"],), ("jacobian", "vjp")),
        ("inv", inverse, d["square"], (), ("jacobian", "jvp", "vjp")),
        ("det", det, d["square"], (), ("gradient", "hessian")),
        ("slogdet", logdet, d["square"], (), ("gradient", "hvp")),
        ("cholesky", cholesky, d["square"], (), ("jacobian", "vjp")),
        ("cholesky-weighted", cholesky_energy, d["square"], (d["weights"],), ("gradient", "hvp")),
        ("eigvalsh", eigenvalues, d["square"], (d["ramp"],), ("gradient", "hvp")),
        ("eigh-vectors", eigenvectors, d["square"], (d["weights"],), ("gradient",)),
        ("svdvals", singular_values, d["rect"], (d["ramp"],), ("gradient",)),
        ("qr", qr_invariant, d["rect"], (), ("gradient",)),
        ("matrix-power", matrix_power, d["square"], (), ("jacobian", "vjp")),
        ("norms", norms, d["rect"], (), ("gradient", "hessian")),
        ("trace-products", trace_products, d["square"], (d["weights"],), ("gradient", "hvp")),
        ("expm", expm, d["square"], (), ("gradient", "jvp")),
    ]
    xfail = {"solve/hvp": TORCH_NESTED_JVP, "det/hessian": TORCH_NESTED_JVP, "slogdet/hvp": TORCH_NESTED_JVP}
    out = []
    for what, fn, x, contexts, operators in table:
        tags = (FAMILY,) + (("contexts",) if contexts else ()) + (("per-framework",) if isinstance(fn, dict) else ())
        out += [Scenario(name=scenario_name(FAMILY, what, op), operator=op, x=x, contexts=contexts,
                         f=fn,  # type: ignore[arg-type]  # the table's rows are tuples of mixed types
                         xfail=dict(xfail.get(f"{what}/{op}", {})), tags=tags + operator_tags(op))
                for op in operators]
    return out
