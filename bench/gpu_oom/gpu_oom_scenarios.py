"""Scenarios for the out-of-memory part of scripts/gpu_check.sh (``gradci check --repo bench/gpu_oom``)."""
import numpy as np

from gradci import Scenario
from gradci.scenarios.authoring.namespace import namespace


def squares(x):
    xp = namespace(x)
    return xp.sum(x * x)


def allocate_twice_the_gpu(x):
    """On a CUDA tensor: asks for twice the GPU's memory, which CUDA refuses (torch.cuda.OutOfMemoryError)."""
    if type(x).__module__.startswith("torch") and x.is_cuda:
        import torch

        _, total = torch.cuda.mem_get_info(x.device)
        torch.empty(2 * total, dtype=torch.uint8, device=x.device)
    return squares(x)


def scenarios():
    x = np.array([0.5, -1.0, 2.0])
    return [Scenario("oom/allocate-twice-the-gpu", "gradient", allocate_twice_the_gpu, x),
            Scenario("oom/after-the-fault", "gradient", squares, x)]
