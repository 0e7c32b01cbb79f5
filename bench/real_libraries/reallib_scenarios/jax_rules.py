"""JAX libraries' hand-written rules: optax's custom_jvps (projection onto the simplex, weighted
log-softmax), lineax's linear_solve (its own JVP, transposed for reverse mode), jaxopt's
custom_root (implicit differentiation, a custom_vjp), diffrax's BacksolveAdjoint (a continuous
adjoint, a custom_vjp) and an equinox module as x."""
import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jaxopt
import lineax as lx
import numpy as np
import optax

from gradci import Scenario

RNG = np.random.default_rng(7)
SCORES = np.array([0.4, -0.2, 0.9, 0.1, 0.35, -0.7])
SIMPLEX_WEIGHTS = RNG.normal(size=6)


# --- optax: custom_jvp rules ----------------------------------------------------------------------

def projection_simplex(x):
    return optax.projections.projection_simplex(x)


def projection_simplex_energy(x):
    return jnp.sum(jnp.asarray(SIMPLEX_WEIGHTS, x.dtype) * projection_simplex(x) ** 2)


def weighted_logsoftmax(x, weights):
    return optax.losses._classification.weighted_logsoftmax(x, weights)


# --- lineax: linear_solve ------------------------------------------------------------------------

def solve(matrix, rhs):
    return lx.linear_solve(lx.MatrixLinearOperator(matrix), rhs, solver=lx.LU()).value


def solve_energy(matrix, rhs):
    return jnp.sum(solve(matrix, rhs) ** 2)


# --- jaxopt: implicit differentiation of a solver ------------------------------------------------

FEATURES, LABELS = RNG.normal(size=(12, 3)), RNG.normal(size=12)


def _ridge_optimality(w, lam, labels):
    features = jnp.asarray(FEATURES, w.dtype)
    return features.T @ (features @ w - labels) / labels.shape[0] + lam * w


@jaxopt.implicit_diff.custom_root(_ridge_optimality)
def _ridge_by_gradient_descent(init, lam, labels):
    """A solver the rule never differentiates: 400 gradient steps (implicit_diff differentiates the
    optimality condition at the solution instead)."""
    step = 0.5
    return jax.lax.fori_loop(0, 400, lambda _, w: w - step * _ridge_optimality(w, lam, labels), init)


def ridge_solution_energy(lam, labels):
    w = _ridge_by_gradient_descent(jnp.zeros(3, labels.dtype), lam, labels)
    return jnp.sum(w ** 2) + jnp.sum(w)


def ridge_exact(lam, labels):
    """The same derivative by hand, in numpy: w = M^-1 c with M = F^T F / n + lam I, c = F^T y / n;
    E = |w|^2 + sum(w), g = dE/dw = 2 w + 1; dE/dlam = -g . M^-1 w, dE/dy = F M^-1 g / n (gradci
    calls the reference with x's parts as f's positional arguments)."""
    lam, labels = float(lam), np.asarray(labels, dtype=np.float64)
    n = labels.shape[0]
    matrix = FEATURES.T @ FEATURES / n + lam * np.eye(3)
    w = np.linalg.solve(matrix, FEATURES.T @ labels / n)
    g = 2 * w + 1
    return np.array(-g @ np.linalg.solve(matrix, w)), FEATURES @ np.linalg.solve(matrix, g) / n


# --- diffrax: BacksolveAdjoint -------------------------------------------------------------------

def decay(y0, rate):
    term = diffrax.ODETerm(lambda t, y, a: -a * y + jnp.sin(t) * y[::-1])
    tol = 1e-10 if y0.dtype == jnp.float64 else 1e-6
    solution = diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 1.0, 0.05, y0, args=rate,
                                   stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                                   adjoint=diffrax.BacksolveAdjoint())
    return jnp.sum(solution.ys[-1] ** 2)


# --- equinox: a module as x, a custom_jvp inside -------------------------------------------------

def simplex_mlp():
    return eqx.nn.MLP(3, 4, 5, 1, final_activation=optax.projections.projection_simplex,
                      key=jax.random.PRNGKey(3))


def mlp_loss(model, inputs, targets):
    return jnp.mean((jax.vmap(model)(inputs) - targets) ** 2)


def scenarios():
    matrix = np.array([[3.0, 1.0, 0.2], [0.5, 2.0, 0.1], [0.3, 0.2, 4.0]])
    rhs = np.array([1.0, -2.0, 0.5])
    inputs, targets = RNG.normal(size=(8, 3)), RNG.dirichlet(np.ones(4), size=8)
    return [
        Scenario("optax/projection-simplex/jacobian", "jacobian", {"jax": projection_simplex}, SCORES),
        Scenario("optax/projection-simplex/hvp", "hvp", {"jax": projection_simplex_energy}, SCORES),
        Scenario("optax/weighted-logsoftmax/jvp", "jvp", {"jax": weighted_logsoftmax},
                 (RNG.normal(size=5), RNG.uniform(0.5, 1.5, size=5)), wrt=(0, 1)),
        Scenario("lineax/linear-solve/vjp", "vjp", {"jax": solve}, (matrix, rhs), wrt=(0, 1)),
        Scenario("lineax/linear-solve/hessian", "hessian", {"jax": solve_energy}, (matrix, rhs), wrt=(0, 1)),
        Scenario("jaxopt/custom-root-ridge/gradient", "gradient", {"jax": ridge_solution_energy},
                 (np.array(0.3), LABELS), wrt=(0, 1)),
        Scenario("jaxopt/custom-root-ridge/exact", "gradient", {"jax": ridge_solution_energy},
                 (np.array(0.3), LABELS), wrt=(0, 1), reference=ridge_exact),
        Scenario("diffrax/backsolve/gradient", "gradient", {"jax": decay},
                 (np.array([1.0, 0.5]), np.array(0.7)), wrt=(0, 1)),
        Scenario("equinox/simplex-mlp/gradient", "gradient", mlp_loss, simplex_mlp(),
                 contexts=(inputs, targets)),
    ]
