"""Neural-network layers, one record each: parameter shapes, input and output shapes, torch and jax forwards.

Mirrors the Flux scenarios of DifferentiationInterfaceTest. The torch forward uses the layer's own
torch kernel (torch.nn.functional, the aten RNN cells) and the jax forward its jax counterpart or the
textbook formula, so the family checks each framework's layer against one shared reference.
Frameworks are imported inside the forwards: the library must load where neither is installed.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

EPS = 1e-5  # torch's default epsilon for LayerNorm and BatchNorm


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter's shape and initial distribution: normal(loc, scale), scale 1/sqrt(fan-in) by default."""

    shape: tuple[int, ...]
    loc: float = 0.0
    scale: float | None = None


@dataclasses.dataclass(frozen=True)
class Buffer:
    """A non-differentiated state array (BatchNorm's running statistics): uniform(low, high)."""

    shape: tuple[int, ...]
    low: float
    high: float


@dataclasses.dataclass(frozen=True)
class Layer:
    name: str
    params: Mapping[str, Param]
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    torch: Callable  # forward(params, inputs, buffers) -> outputs
    jax: Callable
    buffers: Mapping[str, Buffer] = dataclasses.field(default_factory=dict)
    # A numpy predicate on (params, inputs) the drawn point must satisfy, such as "no ties at a max".
    valid: Callable | None = None


# ---- forwards -------------------------------------------------------------------------------------

def mlp_torch(activations: tuple[str, ...]) -> Callable:
    def forward(p, x, buffers):
        import torch

        for i, activation in enumerate(activations, start=1):
            x = getattr(torch.nn.functional, activation)(torch.nn.functional.linear(x, p[f"w{i}"], p[f"b{i}"]))
        return x

    return forward


def mlp_jax(activations: tuple[str, ...]) -> Callable:
    def forward(p, x, buffers):
        import jax

        for i, activation in enumerate(activations, start=1):
            x = getattr(jax.nn, activation)(x @ p[f"w{i}"].T + p[f"b{i}"])
        return x

    return forward


def scale_torch(p, x, buffers):
    import torch

    return torch.tanh(x * p["w"] + p["b"])


def scale_jax(p, x, buffers):
    import jax.numpy as jnp

    return jnp.tanh(x * p["w"] + p["b"])


def skip_torch(p, x, buffers):
    import torch

    return x + torch.tanh(torch.nn.functional.linear(x, p["w"], p["b"]))


def skip_jax(p, x, buffers):
    import jax.numpy as jnp

    return x + jnp.tanh(x @ p["w"].T + p["b"])


def conv_torch(p, x, buffers):
    import torch

    conv = torch.nn.functional.conv1d if x.ndim == 3 else torch.nn.functional.conv2d
    return torch.tanh(conv(x, p["w"], p["b"]))


def _jax_conv(x, w):
    import jax

    spatial = "HW"[: x.ndim - 2]
    numbers = ("NC" + spatial, "OI" + spatial, "NC" + spatial)
    return jax.lax.conv_general_dilated(x, w, window_strides=(1,) * len(spatial), padding="VALID",
                                        dimension_numbers=numbers)


def _channel_bias(b, ndim):
    return b.reshape((1, -1) + (1,) * (ndim - 2))


def conv_jax(p, x, buffers):
    import jax.numpy as jnp

    return jnp.tanh(_jax_conv(x, p["w"]) + _channel_bias(p["b"], x.ndim))


def conv_pool_torch(p, x, buffers):
    import torch

    return torch.nn.functional.avg_pool2d(conv_torch(p, x, buffers), 2)


def conv_pool_jax(p, x, buffers):
    import jax

    y = conv_jax(p, x, buffers)
    return jax.lax.reduce_window(y, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") / 4


def maxout_torch(p, x, buffers):
    import torch

    pieces = torch.einsum("bi,koi->kbo", x, p["w"]) + p["b"][:, None, :]
    return torch.amax(pieces, dim=0)


def maxout_jax(p, x, buffers):
    import jax.numpy as jnp

    pieces = jnp.einsum("bi,koi->kbo", x, p["w"]) + p["b"][:, None, :]
    return jnp.max(pieces, axis=0)


def maxout_untied(p, x, margin=0.05):
    """The winning piece beats the runner-up by ``margin`` everywhere: finite differences see one piece."""
    import numpy as np

    top_two = np.sort(np.einsum("bi,koi->kbo", x, p["w"]) + p["b"][:, None, :], axis=0)[-2:]
    return bool(np.min(top_two[1] - top_two[0]) > margin)


BILINEAR_SPLIT = 3  # the input's first 3 features are x1, the rest x2


def bilinear_torch(p, x, buffers):
    import torch

    return torch.tanh(torch.nn.functional.bilinear(x[:, :BILINEAR_SPLIT], x[:, BILINEAR_SPLIT:], p["w"], p["b"]))


def bilinear_jax(p, x, buffers):
    import jax.numpy as jnp

    return jnp.tanh(jnp.einsum("bi,oij,bj->bo", x[:, :BILINEAR_SPLIT], p["w"], x[:, BILINEAR_SPLIT:]) + p["b"])


TRANSPOSE_STRIDE, TRANSPOSE_PADDING = 2, 1


def conv_transpose_torch(p, x, buffers):
    import torch

    y = torch.nn.functional.conv_transpose2d(x, p["w"], p["b"], stride=TRANSPOSE_STRIDE, padding=TRANSPOSE_PADDING)
    return torch.tanh(y)


def conv_transpose_jax(p, x, buffers):
    # A transposed convolution is the convolution of the stride-dilated input with the flipped kernel,
    # in and out channels swapped, padded by k - 1 - padding.
    import jax
    import jax.numpy as jnp

    kernel = jnp.flip(p["w"], axis=(2, 3)).transpose(1, 0, 2, 3)
    pad = p["w"].shape[2] - 1 - TRANSPOSE_PADDING
    y = jax.lax.conv_general_dilated(x, kernel, window_strides=(1, 1), padding=[(pad, pad), (pad, pad)],
                                     lhs_dilation=(TRANSPOSE_STRIDE,) * 2,
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return jnp.tanh(y + _channel_bias(p["b"], 4))


def recurrent_torch(cell_name: str) -> Callable:
    """Unrolls torch's own aten cell (rnn_tanh_cell, gru_cell, lstm_cell) over the time axis."""

    def forward(p, x, buffers):
        import torch

        cell = getattr(torch, cell_name)
        hidden = p["w_hh"].shape[1]
        h = x.new_zeros((x.shape[1], hidden))
        state = (h, h) if cell_name == "lstm_cell" else h
        outputs = []
        for x_t in x:
            state = cell(x_t, state, p["w_ih"], p["w_hh"], p["b_ih"], p["b_hh"])
            outputs.append(state[0] if cell_name == "lstm_cell" else state)
        return torch.stack(outputs)

    return forward


def _rnn_step(p, h, x_t):
    import jax.numpy as jnp

    h = jnp.tanh(x_t @ p["w_ih"].T + p["b_ih"] + h @ p["w_hh"].T + p["b_hh"])
    return h, h


def _gru_step(p, h, x_t):
    import jax
    import jax.numpy as jnp

    i_r, i_z, i_n = jnp.split(x_t @ p["w_ih"].T + p["b_ih"], 3, axis=-1)
    h_r, h_z, h_n = jnp.split(h @ p["w_hh"].T + p["b_hh"], 3, axis=-1)
    r, z = jax.nn.sigmoid(i_r + h_r), jax.nn.sigmoid(i_z + h_z)
    n = jnp.tanh(i_n + r * h_n)
    h = (1 - z) * n + z * h
    return h, h


def _lstm_step(p, state, x_t):
    import jax
    import jax.numpy as jnp

    h, c = state
    i, f, g, o = jnp.split(x_t @ p["w_ih"].T + p["b_ih"] + h @ p["w_hh"].T + p["b_hh"], 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (h, c), h


def recurrent_jax(step: Callable) -> Callable:
    """The textbook cell (torch's gate order) scanned over the time axis with lax.scan."""

    def forward(p, x, buffers):
        import jax
        import jax.numpy as jnp

        h = jnp.zeros((x.shape[1], p["w_hh"].shape[1]), dtype=x.dtype)
        state = (h, h) if step is _lstm_step else h
        _, outputs = jax.lax.scan(lambda s, x_t: step(p, s, x_t), state, x)
        return outputs

    return forward


def layer_norm_torch(p, x, buffers):
    import torch

    return torch.nn.functional.layer_norm(x, x.shape[-1:], p["gamma"], p["beta"], eps=EPS)


def layer_norm_jax(p, x, buffers):
    import jax.numpy as jnp

    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + EPS) * p["gamma"] + p["beta"]


def batch_norm_torch(p, x, buffers):
    import torch

    return torch.nn.functional.batch_norm(x, buffers["mean"], buffers["var"], p["gamma"], p["beta"],
                                          training=False, eps=EPS)


def batch_norm_jax(p, x, buffers):
    import jax.numpy as jnp

    def per_channel(v):
        return _channel_bias(v, x.ndim)

    return ((x - per_channel(buffers["mean"])) / jnp.sqrt(per_channel(buffers["var"]) + EPS)
            * per_channel(p["gamma"]) + per_channel(p["beta"]))


def attention_torch(p, x, buffers):
    import torch

    linear = torch.nn.functional.linear
    q, k, v = linear(x, p["wq"]), linear(x, p["wk"]), linear(x, p["wv"])
    return linear(torch.nn.functional.scaled_dot_product_attention(q, k, v), p["wo"])


def attention_jax(p, x, buffers):
    import jax
    import jax.numpy as jnp

    q, k, v = x @ p["wq"].T, x @ p["wk"].T, x @ p["wv"].T
    weights = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / q.shape[-1] ** 0.5, axis=-1)
    return (weights @ v) @ p["wo"].T


# ---- records --------------------------------------------------------------------------------------

def _dense(out_features, in_features, index=1):
    return {f"w{index}": Param((out_features, in_features)), f"b{index}": Param((out_features,), scale=0.1)}


def _cell(gates, hidden, features):
    return {"w_ih": Param((gates * hidden, features)), "w_hh": Param((gates * hidden, hidden)),
            "b_ih": Param((gates * hidden,), scale=0.1), "b_hh": Param((gates * hidden,), scale=0.1)}


CHAIN = ("sigmoid", "softplus", "tanh")  # torch.nn.functional and jax.nn share these names
T, B = 4, 2  # sequence length and batch of the recurrent layers

LAYERS: tuple[Layer, ...] = (
    Layer("dense", _dense(4, 3), (3, 3), (3, 4), mlp_torch(("tanh",)), mlp_jax(("tanh",))),
    Layer("chain", {**_dense(5, 3, 1), **_dense(4, 5, 2), **_dense(2, 4, 3)}, (3, 3), (3, 2),
          mlp_torch(CHAIN), mlp_jax(CHAIN)),
    Layer("scale", {"w": Param((4,)), "b": Param((4,), scale=0.1)}, (3, 4), (3, 4), scale_torch, scale_jax),
    Layer("skip-connection", {"w": Param((3, 3)), "b": Param((3,), scale=0.1)}, (3, 3), (3, 3),
          skip_torch, skip_jax),
    Layer("conv1d", {"w": Param((3, 2, 3)), "b": Param((3,), scale=0.1)}, (2, 2, 8), (2, 3, 6),
          conv_torch, conv_jax),
    Layer("conv2d", {"w": Param((3, 2, 3, 3)), "b": Param((3,), scale=0.1)}, (2, 2, 5, 5), (2, 3, 3, 3),
          conv_torch, conv_jax),
    Layer("conv-meanpool", {"w": Param((2, 1, 3, 3)), "b": Param((2,), scale=0.1)}, (2, 1, 6, 6), (2, 2, 2, 2),
          conv_pool_torch, conv_pool_jax),
    Layer("maxout", {"w": Param((3, 4, 3)), "b": Param((3, 4), scale=0.1)}, (3, 3), (3, 4),
          maxout_torch, maxout_jax, valid=maxout_untied),
    Layer("bilinear", {"w": Param((2, 3, 2)), "b": Param((2,), scale=0.1)}, (3, 5), (3, 2),
          bilinear_torch, bilinear_jax),
    Layer("conv-transpose", {"w": Param((2, 3, 3, 3)), "b": Param((3,), scale=0.1)}, (2, 2, 3, 3), (2, 3, 5, 5),
          conv_transpose_torch, conv_transpose_jax),
    Layer("rnn", _cell(1, 3, 2), (T, B, 2), (T, B, 3), recurrent_torch("rnn_tanh_cell"), recurrent_jax(_rnn_step)),
    Layer("lstm", _cell(4, 3, 2), (T, B, 2), (T, B, 3), recurrent_torch("lstm_cell"), recurrent_jax(_lstm_step)),
    Layer("gru", _cell(3, 3, 2), (T, B, 2), (T, B, 3), recurrent_torch("gru_cell"), recurrent_jax(_gru_step)),
    Layer("layer-norm", {"gamma": Param((4,), loc=1.0, scale=0.2), "beta": Param((4,), scale=0.2)},
          (3, 4), (3, 4), layer_norm_torch, layer_norm_jax),
    Layer("batch-norm", {"gamma": Param((3,), loc=1.0, scale=0.2), "beta": Param((3,), scale=0.2)},
          (4, 3, 2), (4, 3, 2), batch_norm_torch, batch_norm_jax,
          buffers={"mean": Buffer((3,), -0.5, 0.5), "var": Buffer((3,), 0.5, 2.0)}),
    Layer("attention", {"wq": Param((2, 4)), "wk": Param((2, 4)), "wv": Param((2, 4)), "wo": Param((4, 2))},
          (2, 3, 4), (2, 3, 4), attention_torch, attention_jax),
)

LARGE_MLP = ("tanh", "tanh", "tanh")
MLP_100K = Layer("mlp-100k", {**_dense(300, 64, 1), **_dense(256, 300, 2), **_dense(16, 256, 3)},
                 (8, 64), (8, 16), mlp_torch(LARGE_MLP), mlp_jax(LARGE_MLP))
