"""gpytorch's hand-written rules: RBFCovariance and MaternCovariance, autograd.Functions (old style)
whose backward gives the kernel matrix's derivative with respect to the lengthscale only (x1 and x2
must not require a gradient: their forward refuses). The kernels call them so in training."""
import numpy as np
import torch
from gpytorch.functions import MaternCovariance, RBFCovariance

from gradci import Scenario

RNG = np.random.default_rng(31)
X1, X2 = RNG.normal(size=(5, 2)), RNG.normal(size=(4, 2))
WEIGHTS = RNG.normal(size=(5, 4))


def _constants(like):
    return (torch.as_tensor(X1, dtype=like.dtype), torch.as_tensor(X2, dtype=like.dtype),
            torch.as_tensor(WEIGHTS, dtype=like.dtype))


def rbf_energy(lengthscale):
    x1, x2, weights = _constants(lengthscale)
    covariance = RBFCovariance.apply(x1, x2, lengthscale, lambda a, b: torch.cdist(a, b) ** 2)
    return torch.sum(covariance * weights)


def matern_energy(lengthscale):
    x1, x2, weights = _constants(lengthscale)
    covariance = MaternCovariance.apply(x1, x2, lengthscale, 2.5, torch.cdist)
    return torch.sum(covariance * weights)


def scenarios():
    lengthscale = np.array([[0.8]])
    return [
        Scenario("gpytorch/rbf-covariance/gradient", "gradient", {"torch": rbf_energy}, lengthscale),
        Scenario("gpytorch/matern-covariance/gradient", "gradient", {"torch": matern_energy}, lengthscale),
    ]
