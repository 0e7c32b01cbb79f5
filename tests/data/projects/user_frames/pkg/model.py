"""A model whose helper indexes past its input: the failing line is line 6."""
import numpy as np


def helper(x):
    return x[(1, 2, 3)]


def loss(x):
    return np.sum(helper(x))
