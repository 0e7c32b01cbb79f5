"""Another repository's rule, 50% wrong in its backward: alone, every cell fails."""
import numpy as np
import torch

from gradci import Scenario
from gradci._testing.planted import torch_old_style_power

cube = torch_old_style_power(3, backward_scale=1.5)


def scenarios():
    return [Scenario(f"victim/cube{i}", "gradient", {"torch": lambda x: torch.sum(cube(x))},
                     np.linspace(0.2, 1.0, 3) + i, dtypes=("float64",)) for i in range(4)]
