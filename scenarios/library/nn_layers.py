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


def max_pool_torch(p, x, buffers):
    import torch

    return torch.nn.functional.max_pool2d(conv_torch(p, x, buffers), 2)


def max_pool_jax(p, x, buffers):
    import jax
    import jax.numpy as jnp

    y = conv_jax(p, x, buffers)
    return jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _conv2d_numpy(x, w, b):
    """A valid 2-d convolution (cross-correlation, as torch's) in numpy, for the drawn point's checks."""
    import numpy as np

    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w) + b[None, :, None, None]


def max_pool_untied(p, x, margin=0.05):
    """In every 2×2 window the maximum beats the runner-up by ``margin``: finite differences see one winner."""
    import numpy as np

    y = np.tanh(_conv2d_numpy(x, p["w"], p["b"]))
    n, c, h, w = y.shape
    windows = y.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    top_two = np.sort(windows, axis=-1)[..., -2:]
    return bool(np.min(top_two[..., 1] - top_two[..., 0]) > margin)


def relu_mlp_torch(p, x, buffers):
    import torch

    hidden = torch.relu(torch.nn.functional.linear(x, p["w1"], p["b1"]))
    return torch.tanh(torch.nn.functional.linear(hidden, p["w2"], p["b2"]))


def relu_mlp_jax(p, x, buffers):
    import jax
    import jax.numpy as jnp

    return jnp.tanh(jax.nn.relu(x @ p["w1"].T + p["b1"]) @ p["w2"].T + p["b2"])


def relu_away_from_zero(p, x, margin=0.05):
    """Every pre-activation of the relu is at least ``margin`` from 0, its kink."""
    import numpy as np

    return bool(np.min(np.abs(x @ p["w1"].T + p["b1"])) > margin)


GROUPS = 2  # GroupNorm's groups: 4 channels in 2 groups of 2


def group_norm_torch(p, x, buffers):
    import torch

    return torch.nn.functional.group_norm(x, GROUPS, p["gamma"], p["beta"], eps=EPS)


def group_norm_jax(p, x, buffers):
    import jax.numpy as jnp

    grouped = x.reshape(x.shape[0], GROUPS, -1)
    mean, var = jnp.mean(grouped, axis=-1, keepdims=True), jnp.var(grouped, axis=-1, keepdims=True)
    normalised = ((grouped - mean) / jnp.sqrt(var + EPS)).reshape(x.shape)
    return normalised * _channel_bias(p["gamma"], x.ndim) + _channel_bias(p["beta"], x.ndim)


def instance_norm_torch(p, x, buffers):
    import torch

    return torch.nn.functional.instance_norm(x, weight=p["gamma"], bias=p["beta"], use_input_stats=True, eps=EPS)


def instance_norm_jax(p, x, buffers):
    import jax.numpy as jnp

    spatial = tuple(range(2, x.ndim))
    mean, var = jnp.mean(x, axis=spatial, keepdims=True), jnp.var(x, axis=spatial, keepdims=True)
    return (x - mean) / jnp.sqrt(var + EPS) * _channel_bias(p["gamma"], x.ndim) + _channel_bias(p["beta"], x.ndim)


MOMENTUM = 0.1  # torch's default for BatchNorm's running statistics


def batch_norm_training_torch(p, x, buffers):
    """BatchNorm in training mode: batch statistics, running statistics updated (on copies) and not differentiated."""
    import torch

    running_mean, running_var = buffers["mean"].clone(), buffers["var"].clone()
    return torch.nn.functional.batch_norm(x, running_mean, running_var, p["gamma"], p["beta"], training=True,
                                          momentum=MOMENTUM, eps=EPS)


def batch_norm_training_jax(p, x, buffers):
    import jax.numpy as jnp

    axes = (0, *range(2, x.ndim))
    mean, var = jnp.mean(x, axis=axes, keepdims=True), jnp.var(x, axis=axes, keepdims=True)
    return (x - mean) / jnp.sqrt(var + EPS) * _channel_bias(p["gamma"], x.ndim) + _channel_bias(p["beta"], x.ndim)


def conv_batch_norm_torch(p, x, buffers):
    import torch

    y = torch.nn.functional.conv2d(x, p["w"], p["b"])
    return torch.tanh(batch_norm_training_torch(p, y, buffers))


def conv_batch_norm_jax(p, x, buffers):
    import jax.numpy as jnp

    y = _jax_conv(x, p["w"]) + _channel_bias(p["b"], x.ndim)
    return jnp.tanh(batch_norm_training_jax(p, y, buffers))


def _jax_conv_same(x, w):
    import jax

    return jax.lax.conv_general_dilated(x, w, window_strides=(1, 1), padding="SAME",
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))


def conv_same_torch(p, x, buffers):
    import torch

    return torch.nn.functional.gelu(torch.nn.functional.conv2d(x, p["w"], p["b"], padding="same"))


def conv_same_jax(p, x, buffers):
    import jax

    # torch's gelu is the exact (erf) one; jax's default is the tanh approximation.
    return jax.nn.gelu(_jax_conv_same(x, p["w"]) + _channel_bias(p["b"], x.ndim), approximate=False)


def conv_stack_torch(p, x, buffers):
    import torch

    hidden = torch.nn.functional.gelu(torch.nn.functional.conv2d(x, p["w1"], p["b1"], padding="same"))
    return torch.tanh(torch.nn.functional.conv2d(hidden, p["w2"], p["b2"]))


def conv_stack_jax(p, x, buffers):
    import jax
    import jax.numpy as jnp

    hidden = jax.nn.gelu(_jax_conv_same(x, p["w1"]) + _channel_bias(p["b1"], x.ndim), approximate=False)
    return jnp.tanh(_jax_conv(hidden, p["w2"]) + _channel_bias(p["b2"], x.ndim))


def _layer_params(p, layer):
    return {name.removeprefix(f"l{layer}_"): value for name, value in p.items() if name.startswith(f"l{layer}_")}


def stacked(one: Callable, depth: int) -> Callable:
    """``depth`` layers of ``one`` (parameters prefixed l1_, l2_, …), each over the previous one's outputs."""
    def forward(p, x, buffers):
        for layer in range(1, depth + 1):
            x = one(_layer_params(p, layer), x, buffers)
        return x

    return forward


# ---- records --------------------------------------------------------------------------------------

def _dense(out_features, in_features, index=1):
    return {f"w{index}": Param((out_features, in_features)), f"b{index}": Param((out_features,), scale=0.1)}


def _cell(gates, hidden, features):
    return {"w_ih": Param((gates * hidden, features)), "w_hh": Param((gates * hidden, hidden)),
            "b_ih": Param((gates * hidden,), scale=0.1), "b_hh": Param((gates * hidden,), scale=0.1)}


def _affine(channels):
    """A normalisation's per-channel scale (about 1) and shift."""
    return {"gamma": Param((channels,), loc=1.0, scale=0.2), "beta": Param((channels,), scale=0.2)}


def _running_statistics(channels):
    return {"mean": Buffer((channels,), -0.5, 0.5), "var": Buffer((channels,), 0.5, 2.0)}


def _prefixed(params, prefix):
    return {prefix + name: spec for name, spec in params.items()}


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
    Layer("layer-norm", _affine(4), (3, 4), (3, 4), layer_norm_torch, layer_norm_jax),
    Layer("batch-norm", _affine(3), (4, 3, 2), (4, 3, 2), batch_norm_torch, batch_norm_jax,
          buffers=_running_statistics(3)),
    Layer("attention", {"wq": Param((2, 4)), "wk": Param((2, 4)), "wv": Param((2, 4)), "wo": Param((4, 2))},
          (2, 3, 4), (2, 3, 4), attention_torch, attention_jax),
    # Beyond DIT's Flux layers: pooling by max, the other normalisations, training-mode statistics,
    # same padding, relu and gelu inside layers, and stacks of layers.
    Layer("conv-maxpool", {"w": Param((2, 1, 3, 3)), "b": Param((2,), scale=0.1)}, (2, 1, 6, 6), (2, 2, 2, 2),
          max_pool_torch, max_pool_jax, valid=max_pool_untied),
    Layer("relu-mlp", {**_dense(5, 3, 1), **_dense(2, 5, 2)}, (3, 3), (3, 2), relu_mlp_torch, relu_mlp_jax,
          valid=relu_away_from_zero),
    Layer("group-norm", _affine(4), (2, 4, 3), (2, 4, 3), group_norm_torch, group_norm_jax),
    Layer("instance-norm", _affine(3), (2, 3, 4), (2, 3, 4), instance_norm_torch, instance_norm_jax),
    Layer("batch-norm-training", _affine(3), (4, 3, 2), (4, 3, 2), batch_norm_training_torch,
          batch_norm_training_jax, buffers=_running_statistics(3)),
    Layer("conv-batch-norm", {"w": Param((3, 2, 3, 3)), "b": Param((3,), scale=0.1), **_affine(3)}, (4, 2, 5, 5),
          (4, 3, 3, 3), conv_batch_norm_torch, conv_batch_norm_jax, buffers=_running_statistics(3)),
    Layer("conv-same-gelu", {"w": Param((3, 2, 3, 3)), "b": Param((3,), scale=0.1)}, (2, 2, 5, 5), (2, 3, 5, 5),
          conv_same_torch, conv_same_jax),
    Layer("conv-stack", {"w1": Param((3, 2, 3, 3)), "b1": Param((3,), scale=0.1), "w2": Param((2, 3, 3, 3)),
                         "b2": Param((2,), scale=0.1)}, (2, 2, 5, 5), (2, 2, 3, 3), conv_stack_torch, conv_stack_jax),
    Layer("lstm-stack", {**_prefixed(_cell(4, 3, 2), "l1_"), **_prefixed(_cell(4, 3, 3), "l2_")}, (T, B, 2),
          (T, B, 3), stacked(recurrent_torch("lstm_cell"), 2), stacked(recurrent_jax(_lstm_step), 2)),
)

LARGE_MLP = ("tanh", "tanh", "tanh")
MLP_100K = Layer("mlp-100k", {**_dense(300, 64, 1), **_dense(256, 300, 2), **_dense(16, 256, 3)},
                 (8, 64), (8, 16), mlp_torch(LARGE_MLP), mlp_jax(LARGE_MLP))
