"""Weights read from a data file once, through a cache of the project's own."""
import functools
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data" / "weights.txt"


@functools.cache
def weights():
    return np.loadtxt(DATA)
