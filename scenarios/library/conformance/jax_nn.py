"""jax.nn: activations, the softmax family and standardize; dropout from jax.random under a fixed key."""
from __future__ import annotations

from ._table import JACOBIAN, JVP, VJP, Row, signed

AREA = "jax.nn"
N = "jax.nn."


def keyed_dropout(bernoulli, x):
    """Inverted dropout from jax.random.bernoulli under a fixed key.

    The same mask at every evaluation, so the function is deterministic and its derivative the mask
    over the keep rate.
    """
    import jax

    keep = 0.7
    return x * bernoulli(jax.random.key(0), keep, x.shape) / keep


ROWS = (
    Row(N + "relu", (6,), signed(0.2, 2), JACOBIAN),
    Row(N + "relu6", (6,), signed(0.2, 2), VJP),
    Row(N + "elu", (), signed(0.2, 2), ("derivative",)),
    Row(N + "selu", (4,), signed(0.2, 2), ("hvp",)),
    Row(N + "celu", (6,), signed(0.2, 2), JVP, kwargs={"alpha": 0.7}),
    Row(N + "gelu", (6,), (-3, 3), JACOBIAN),
    Row(N + "gelu", (), (-3, 3), ("second_derivative",), label="exact", kwargs={"approximate": False}),
    Row(N + "glu", (6,), (-2, 2), VJP),
    Row(N + "hard_sigmoid", (6,), (-2.5, 2.5), JVP),
    Row(N + "hard_silu", (6,), (-2.5, 2.5), VJP),
    Row(N + "hard_tanh", (6,), (-0.9, 0.9), JVP),
    Row(N + "leaky_relu", (6,), signed(0.2, 2), VJP, kwargs={"negative_slope": 0.1}),
    Row(N + "log1mexp", (5,), (0.2, 3), JVP),
    Row(N + "log_sigmoid", (), (-3, 3), ("derivative",)),
    Row(N + "log_softmax", (2, 3), (-2, 2), JACOBIAN),
    Row(N + "logmeanexp", (6,), (-2, 2), ("gradient",)),
    Row(N + "logsumexp", (4,), (-2, 2), ("value_and_gradient",) + ("hessian",)),
    Row(N + "mish", (4,), (-3, 3), ("hvp",)),
    Row(N + "sigmoid", (), (-3, 3), ("second_derivative",)),
    Row(N + "silu", (4,), (-3, 3), ("hessian",) + ("jvp",)),
    Row(N + "swish", (6,), (-3, 3), VJP),
    Row(N + "soft_sign", (5,), signed(0.2, 2), JVP),
    Row(N + "softmax", (4,), (-2, 2), JACOBIAN + ("hvp",)),
    Row(N + "softplus", (), (-3, 3), ("derivative",)),
    Row(N + "sparse_plus", (6,), (-0.8, 0.8), VJP),
    Row(N + "sparse_sigmoid", (6,), (-0.8, 0.8), JVP),
    Row(N + "squareplus", (4,), (-2, 2), ("hessian",)),
    Row(N + "standardize", (2, 4), (-2, 2), JACOBIAN),
    Row(N + "tanh", (6,), (-2, 2), VJP),
    Row("jax.random.bernoulli", (6,), (-2, 2), JVP + ("gradient",), label="dropout", call=keyed_dropout),
)
