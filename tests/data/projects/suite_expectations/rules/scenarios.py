"""Rules written the old way (forward(ctx, x)), as entmax, torchdiffeq and gpytorch write them."""
import numpy as np
import torch

from gradci import Scenario
from gradci._testing.planted import torch_old_style_power

square = torch_old_style_power(2, jvp_scale=1.0)  # right, with a jvp rule as right


def square_sum(x):
    return torch.sum(square(x) * torch.arange(1, x.shape[0] + 1, dtype=x.dtype))


def scenarios():
    x = np.array([0.3, -0.5, 0.8])
    return [
        Scenario("oldstyle/square", "gradient", {"torch": square_sum}, x),
        Scenario("fixed/square", "gradient", {"torch": square_sum}, x),
    ]
