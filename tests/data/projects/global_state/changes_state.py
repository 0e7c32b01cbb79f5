"""A scenario module that changes every kind of process-wide framework state at import."""
import random

import jax
import numpy as np
import torch

from gradci import Scenario, namespace

torch.set_default_dtype(torch.float64)
torch.backends.cuda.matmul.allow_tf32 = True
torch.set_float32_matmul_precision("medium")
jax.config.update("jax_default_matmul_precision", "bfloat16")
np.seterr(all="raise")
np.random.seed(1)
random.seed(1)
torch.manual_seed(1)


def scenarios():
    return [Scenario("changes/sin", "gradient", lambda x: namespace(x).sum(namespace(x).sin(x)), np.array([0.1, 0.2]))]
