"""PyTorch libraries' hand-written rules: entmax's autograd.Functions (old style), torchdiffeq's
adjoint (an old-style Function, with an nn.Module's parameters as x), kornia's setup_context-style
_NullSpaceBasis. Points are drawn with a fixed seed and kept away from kinks (sparsemax's support
changing) unless a scenario says otherwise."""
import entmax
import numpy as np
import torch
import torchdiffeq
from kornia.geometry.epipolar.essential import _NullSpaceBasis

from gradci import Scenario

RNG = np.random.default_rng(19)
LOGITS = np.array([[0.9, -0.4, 0.55, 0.1, -1.2], [0.2, 0.65, -0.3, 0.45, 0.05], [1.4, 0.3, 0.95, -0.6, 0.7]])
WEIGHTS = RNG.normal(size=LOGITS.shape)


def weighted(y, w):
    return torch.sum(y * torch.as_tensor(w, dtype=y.dtype))


# --- entmax: sparsemax, entmax15, bisection, losses -------------------------------------------

def sparsemax(x):
    return entmax.sparsemax(x, dim=-1)


def entmax15_weighted_square(x):
    """A smooth loss of entmax15 whose Hessian goes through Entmax15Function's double backward."""
    return weighted(entmax.entmax15(x, dim=-1) ** 2, WEIGHTS)


def entmax15_full_support(x):
    """The same loss where every output is positive: no sqrt(0) in the backward."""
    return weighted(entmax.entmax15(x, dim=-1) ** 2, WEIGHTS[:1, :4])


def entmax_bisect(x, alpha):
    """entmax with a learnable alpha: EntmaxBisectFunction's backward returns d/d alpha too."""
    return weighted(entmax.entmax_bisect(x, alpha, dim=-1, n_iter=60), WEIGHTS)


def sparsemax_loss(x, target):
    return torch.sum(entmax.sparsemax_loss(x, target))


class Entmax15Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 5)
        self.entmax = entmax.Entmax15(dim=-1)

    def forward(self, inputs):
        return self.entmax(self.linear(inputs))


def head_loss(model, inputs, targets):
    return torch.mean((model(inputs) - targets) ** 2)


# --- torchdiffeq: the adjoint method ------------------------------------------------------------

class Vectorfield(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(2, 2)

    def forward(self, t, y):
        return torch.tanh(self.linear(y)) - 0.3 * y


def _tolerance(dtype):
    return 1e-10 if dtype == torch.float64 else 1e-6


def ode_params_loss(field, y0, times):
    """odeint_adjoint's gradient with respect to the vector field's parameters (the adjoint state)."""
    tol = _tolerance(y0.dtype)
    ys = torchdiffeq.odeint_adjoint(field, y0, times, rtol=tol, atol=tol, method="dopri5")
    return torch.sum(ys[-1] ** 2)


FIELD = Vectorfield()   # captured as a global: gradci hands each cell a copy in its dtype


def ode_final_state(y0):
    tol = _tolerance(y0.dtype)
    times = torch.tensor([0.0, 0.5, 1.0], dtype=y0.dtype)
    return torchdiffeq.odeint_adjoint(FIELD, y0, times, rtol=tol, atol=tol, method="dopri5")


# --- kornia: a setup_context-style Function -----------------------------------------------------

PROBE = RNG.normal(size=(9, 9))


def nullspace_projection(design):
    """A basis-independent function of the four-vector subspace _NullSpaceBasis differentiates:
    <P, W> with P = B B^T the projection onto it (its docstring: only the subspace is defined)."""
    basis = _NullSpaceBasis.apply(design)[0]
    projection = basis @ basis.transpose(-1, -2)
    return torch.sum(projection * torch.as_tensor(PROBE, dtype=design.dtype))


def scenarios():
    inputs, targets = RNG.normal(size=(6, 4)), RNG.uniform(size=(6, 5))
    return [
        Scenario("entmax/sparsemax/vjp", "vjp", {"torch": sparsemax}, LOGITS),
        Scenario("entmax/entmax15/jacobian", "jacobian", {"torch": lambda x: entmax.entmax15(x, dim=-1)}, LOGITS),
        Scenario("entmax/entmax15/hvp", "hvp", {"torch": entmax15_weighted_square}, LOGITS),
        Scenario("entmax/entmax15-full-support/hvp", "hvp", {"torch": entmax15_full_support},
                 np.array([[0.3, 0.1, 0.25, 0.05]])),
        Scenario("entmax/entmax-bisect/gradient", "gradient", {"torch": entmax_bisect},
                 (LOGITS, np.array(1.3)), wrt=(0, 1)),
        Scenario("entmax/sparsemax-loss/gradient", "gradient", {"torch": sparsemax_loss}, LOGITS,
                 contexts=(np.array([0, 1, 2]),)),
        Scenario("entmax/sparsemax-loss/hessian", "hessian", {"torch": sparsemax_loss}, LOGITS[:1],
                 contexts=(np.array([0]),)),
        Scenario("entmax/entmax15-module/gradient", "gradient", head_loss, Entmax15Head(),
                 contexts=(inputs, targets)),
        # The adjoint integrates the parameters' gradient by a second adaptive solve: it is the
        # forward's derivative only to about that solve's tolerance (2e-8 absolute measured here),
        # not to float64's default 1e-7 relative: the scenario says so.
        Scenario("torchdiffeq/adjoint-params/gradient", "gradient", ode_params_loss, Vectorfield(),
                 contexts=(np.array([0.5, -0.3]), np.array([0.0, 0.5, 1.0])), rtol=1e-5),
        Scenario("torchdiffeq/adjoint-y0/vjp", "vjp", {"torch": ode_final_state}, np.array([0.5, -0.3])),
        Scenario("kornia/nullspace-basis/gradient", "gradient", {"torch": nullspace_projection},
                 RNG.normal(size=(1, 6, 9))),
        Scenario("kornia/nullspace-basis/vjp", "vjp", {"torch": lambda d: _NullSpaceBasis.apply(d)[0]
                                                       @ _NullSpaceBasis.apply(d)[0].transpose(-1, -2)},
                 RNG.normal(size=(2, 7, 9))),
    ]
