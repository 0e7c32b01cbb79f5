"""torch.nn.functional: activations, normalisations, convolutions, pooling, resampling, losses."""
from __future__ import annotations

from ._table import (
    FULL,
    JACOBIAN,
    JVP,
    LOSS,
    SCALAR,
    SECOND,
    TORCH_FORWARD,
    VJP,
    Row,
    indices,
    lacks,
    signed,
    spread,
    uniform,
)

AREA = "torch.nn.functional"
F = "torch.nn.functional."
UNIT = uniform(0.0, 1.0)


def seeded_dropout(fn, x):
    """Dropout in training mode under a fixed seed.

    Every evaluation drops the same elements, so the function is deterministic (the derivative is the
    kept mask over 1 - p). The global generator is restored afterwards.
    """
    import torch

    with torch.random.fork_rng(devices=[x.device] if x.is_cuda else []):
        torch.manual_seed(0)
        return fn(x, p=0.3, training=True)


def signs(g, shape):
    return g.choice([-1.0, 1.0], size=shape)


def near_edges(g, shape):
    """Probabilities within 0.05 of 0 or 1: binary cross-entropy's logarithms at their steepest."""
    return g.choice([0.0, 0.95], size=shape) + g.uniform(0.01, 0.04, size=shape)


ROWS = (
    # activations (input points away from every kink)
    Row(F + "relu", (6,), signed(0.2, 2), FULL),
    Row(F + "relu6", (6,), signed(0.2, 2), VJP),
    Row(F + "elu", (), signed(0.2, 2), SCALAR),
    Row(F + "selu", (4,), signed(0.2, 2), SECOND),
    Row(F + "celu", (6,), signed(0.2, 2), JACOBIAN, kwargs={"alpha": 0.7}),
    Row(F + "leaky_relu", (6,), signed(0.2, 2), JVP, kwargs={"negative_slope": 0.1}),
    Row(F + "prelu", (2, 3), signed(0.2, 2), VJP, contexts=(((3,), uniform(0.1, 0.5)),)),
    Row(F + "rrelu", (6,), signed(0.2, 2), JVP, kwargs={"training": False},
        skip=lacks(TORCH_FORWARD, "vmap rule for rrelu_with_noise (jacfwd batches its jvps)")),
    Row(F + "glu", (6,), (-2, 2), FULL),
    Row(F + "gelu", (6,), (-3, 3), FULL),
    Row(F + "gelu", (), (-3, 3), SCALAR, kwargs={"approximate": "tanh"}, label="tanh"),
    Row(F + "logsigmoid", (), (-3, 3), SCALAR),
    Row(F + "hardshrink", (6,), signed(0.7, 2), VJP),
    Row(F + "tanhshrink", (), (-2, 2), SCALAR),
    Row(F + "softsign", (4,), signed(0.2, 2), SECOND),
    Row(F + "softplus", (4,), (-3, 3), SECOND + ("jvp",), kwargs={"beta": 2.0}),
    Row(F + "softmin", (5,), (-2, 2), FULL, kwargs={"dim": 0}),
    Row(F + "softmax", (4,), (-2, 2), FULL + SECOND, kwargs={"dim": 0}),
    Row(F + "log_softmax", (2, 3), (-2, 2), JACOBIAN, kwargs={"dim": 1}),
    Row(F + "tanh", (), (-2, 2), SCALAR),
    Row(F + "sigmoid", (4,), (-3, 3), SECOND),
    # vjp only: a jvp from reverse mode differentiates hardsigmoid_backward, which has no derivative.
    Row(F + "hardsigmoid", (6,), (-2.5, 2.5), ("vjp",)),
    Row(F + "silu", (4,), (-3, 3), SECOND + ("jvp",)),
    Row(F + "mish", (4,), (-3, 3), SECOND),
    Row(F + "hardswish", (6,), (-2.5, 2.5), JVP),
    Row(F + "hardtanh", (6,), (-0.9, 0.9), VJP),
    Row(F + "threshold", (6,), signed(0.7, 2), JVP, kwargs={"threshold": 0.5, "value": 0.0}),
    Row(F + "softshrink", (6,), signed(0.8, 2), VJP),
    Row(F + "dropout", (6,), (-2, 2), JVP + ("gradient",), call=seeded_dropout),
    # normalisation; batch norm in training mode updates its running statistics (state contexts)
    Row(F + "batch_norm", (4, 3), (-2, 2), FULL + ("gradient",), state=(0, 1),
        call=lambda f, x, mean, var: f(x, mean, var, training=True, momentum=0.1),
        contexts=(((3,), (-0.5, 0.5)), ((3,), (0.5, 2.0)))),
    Row(F + "batch_norm", (4, 3), (-2, 2), VJP, label="eval",
        call=lambda f, x, mean, var, w, b: f(x, mean, var, w, b, training=False),
        contexts=(((3,), (-0.5, 0.5)), ((3,), (0.5, 2.0)), ((3,), (0.5, 1.5)), ((3,), (-0.5, 0.5)))),
    Row(F + "group_norm", (1, 4, 3), (-2, 2), FULL, kwargs={"num_groups": 2}),
    Row(F + "instance_norm", (1, 2, 4), (-2, 2), JVP),
    Row(F + "layer_norm", (3, 4), (-2, 2), JACOBIAN, kwargs={"normalized_shape": (4,)}),
    Row(F + "rms_norm", (3, 4), (-2, 2), VJP, kwargs={"normalized_shape": (4,)}),
    Row(F + "local_response_norm", (1, 4, 3), (-2, 2), JVP, kwargs={"size": 2}),
    Row(F + "normalize", (3, 4), (-2, 2), FULL, kwargs={"dim": 1}),
    # linear maps, convolutions, pooling
    Row(F + "linear", (2, 3), (-1, 1), JACOBIAN, contexts=(((4, 3), (-1, 1)), ((4,), (-1, 1)))),
    Row(F + "bilinear", (2, 4), (-1, 1), VJP, call=lambda f, x, w: f(x[:, :2], x[:, 2:], w),
        contexts=(((3, 2, 2), (-1, 1)),)),
    Row(F + "conv1d", (1, 2, 6), (-1, 1), JVP + ("gradient",), contexts=(((3, 2, 3), (-1, 1)),)),
    Row(F + "conv2d", (1, 1, 3, 4), (-1, 1), FULL, contexts=(((2, 1, 2, 2), (-1, 1)),)),
    Row(F + "conv3d", (1, 1, 2, 2, 3), (-1, 1), VJP, contexts=(((1, 1, 2, 2, 2), (-1, 1)),)),
    Row(F + "conv_transpose1d", (1, 2, 4), (-1, 1), JVP, kwargs={"stride": 2},
        contexts=(((2, 3, 2), (-1, 1)),)),
    Row(F + "conv_transpose2d", (1, 1, 2, 3), (-1, 1), VJP, contexts=(((1, 2, 2, 2), (-1, 1)),)),
    Row(F + "unfold", (1, 1, 3, 4), (-1, 1), JVP, kwargs={"kernel_size": 2}),
    Row(F + "fold", (1, 4, 2), (-1, 1), VJP, kwargs={"output_size": (2, 3), "kernel_size": 2}),
    Row(F + "avg_pool1d", (1, 2, 6), (-1, 1), JVP, kwargs={"kernel_size": 2}),
    Row(F + "avg_pool2d", (1, 1, 3, 4), (-1, 1), VJP, kwargs={"kernel_size": 2}),
    Row(F + "max_pool1d", (1, 1, 8), spread(-2, 2), JVP, kwargs={"kernel_size": 2}),
    Row(F + "max_pool2d", (1, 1, 3, 4), spread(-2, 2), JACOBIAN, kwargs={"kernel_size": 2}),
    Row(F + "lp_pool1d", (1, 1, 8), (0.3, 2), VJP, kwargs={"norm_type": 2, "kernel_size": 2}),
    Row(F + "adaptive_avg_pool1d", (1, 2, 5), (-1, 1), JVP, kwargs={"output_size": 3}),
    Row(F + "adaptive_max_pool1d", (1, 1, 8), spread(-2, 2), VJP, kwargs={"output_size": 3}),
    # resampling and rearranging
    Row(F + "interpolate", (1, 2, 4), (-1, 1), JVP, kwargs={"scale_factor": 2.0, "mode": "linear"}),
    Row(F + "interpolate", (1, 1, 3, 3), (-1, 1), VJP, label="bicubic",
        kwargs={"size": (4, 5), "mode": "bicubic"}),
    Row(F + "interpolate", (1, 1, 3, 3), (-1, 1), JVP, label="nearest", kwargs={"scale_factor": 2.0}),
    Row(F + "grid_sample", (1, 1, 3, 3), (-1, 1), VJP, kwargs={"align_corners": False},
        contexts=(((1, 2, 2, 2), (-0.8, 0.8)),),
        skip=lacks(TORCH_FORWARD, "forward-mode derivative of grid_sampler_2d")),
    Row(F + "grid_sample", (1, 2, 2, 2), (-0.8, 0.8), JVP, label="grid",
        call=lambda f, grid, image: f(image, grid, align_corners=False), contexts=(((1, 1, 3, 3), (-1, 1)),),
        skip=lacks(TORCH_FORWARD, "forward-mode derivative of grid_sampler_2d")),
    Row(F + "affine_grid", (1, 2, 3), (-1, 1), FULL, kwargs={"size": (1, 1, 2, 3), "align_corners": False}),
    Row(F + "pad", (1, 2, 4), (-1, 1), VJP, kwargs={"pad": (2, 1), "mode": "reflect"}),
    Row(F + "pad", (1, 2, 4), (-1, 1), JVP, label="replicate", kwargs={"pad": (2, 1), "mode": "replicate"}),
    Row(F + "pad", (1, 2, 4), (-1, 1), VJP, label="circular", kwargs={"pad": (2, 1), "mode": "circular"}),
    Row(F + "pixel_shuffle", (1, 4, 1, 3), (-1, 1), JVP, kwargs={"upscale_factor": 2}),
    Row(F + "pixel_unshuffle", (1, 1, 2, 4), (-1, 1), VJP, kwargs={"downscale_factor": 2}),
    # distances, embeddings, attention
    Row(F + "cosine_similarity", (2, 4), (-1, 1), LOSS + ("jvp",), call=lambda f, x: f(x[0], x[1], dim=0)),
    Row(F + "pairwise_distance", (2, 4), (-1, 1), JVP + ("gradient",), call=lambda f, x: f(x[:1], x[1:])),
    # jacobian only: a jvp from reverse mode differentiates _pdist_backward, which has no derivative.
    Row(F + "pdist", (3, 3), (-1, 1), ("jacobian",),
        skip=lacks(TORCH_FORWARD, "forward-mode derivative of _pdist_forward")),
    Row(F + "embedding", (4, 3), (-1, 1), VJP + ("gradient",),
        call=lambda f, x: f(indices(x, (0, 2, 2, 3)), x)),
    # vjp only: a jvp from reverse mode differentiates _embedding_bag_backward, which has no derivative.
    Row(F + "embedding_bag", (4, 3), (-1, 1), ("vjp",),
        skip=lacks(TORCH_FORWARD, "forward-mode derivative of _embedding_bag"),
        call=lambda f, x: f(indices(x, (0, 2, 1, 3)), x, indices(x, (0, 2)), mode="mean")),
    Row(F + "scaled_dot_product_attention", (1, 3, 4), (-1, 1), JVP + ("gradient",),
        call=lambda f, x: f(x, x * 0.5, x)),
    Row(F + "scaled_dot_product_attention", (1, 3, 4), (-1, 1), VJP, label="causal",
        call=lambda f, x, k: f(x, k, x, is_causal=True), contexts=(((1, 3, 4), (-1, 1)),)),
    # losses (scalar already: the scalar operators see its square)
    Row(F + "mse_loss", (6,), (-1, 1), ("gradient",), contexts=(((6,), (-1, 1)),)),
    Row(F + "l1_loss", (6,), signed(0.5, 2), ("value_and_gradient",), contexts=(((6,), (-0.1, 0.1)),)),
    Row(F + "smooth_l1_loss", (4,), signed(0.1, 0.8), LOSS + SECOND, contexts=(((4,), (-0.05, 0.05)),)),
    Row(F + "smooth_l1_loss", (6,), signed(0.8, 2), ("gradient",), label="linear", kwargs={"beta": 0.5},
        contexts=(((6,), (-0.05, 0.05)),)),
    Row(F + "huber_loss", (6,), signed(0.8, 2), ("value_and_gradient",), kwargs={"delta": 0.5},
        contexts=(((6,), (-0.05, 0.05)),)),
    Row(F + "binary_cross_entropy", (4,), near_edges, LOSS + SECOND, contexts=(((4,), UNIT),)),
    Row(F + "binary_cross_entropy_with_logits", (6,), (-3, 3), ("gradient",), contexts=(((6,), UNIT),)),
    Row(F + "cross_entropy", (3, 4), (-2, 2), ("value_and_gradient",), call=lambda f, x: f(x, indices(x, (0, 3, 1)))),
    Row(F + "cross_entropy", (1, 4), (-2, 2), SECOND, label="one", call=lambda f, x: f(x, indices(x, (2,)))),
    Row(F + "cross_entropy", (3, 4), (-2, 2), ("gradient",), label="label_smoothing",
        call=lambda f, x: f(x, indices(x, (2, 0, 1)), label_smoothing=0.1)),
    Row(F + "nll_loss", (3, 4), (-2, -0.2), ("value_and_gradient",), call=lambda f, x: f(x, indices(x, (1, 3, 0)))),
    Row(F + "kl_div", (4,), (-2, -0.2), LOSS + SECOND, kwargs={"reduction": "batchmean"},
        contexts=(((4,), (0.1, 0.5)),)),
    Row(F + "poisson_nll_loss", (4,), (-1, 1), LOSS + SECOND, contexts=(((4,), (0, 3)),)),
    Row(F + "gaussian_nll_loss", (4,), (-1, 1), LOSS + SECOND, contexts=(((4,), (-1, 1)), ((4,), (0.5, 2)))),
    Row(F + "gaussian_nll_loss", (4,), (0.5, 2), ("gradient",), label="var", call=lambda f, var, x, t: f(x, t, var),
        contexts=(((4,), (-1, 1)), ((4,), (-1, 1)))),
    # First order only: soft_margin_loss_backward has no forward-mode derivative (forward-over-reverse).
    Row(F + "soft_margin_loss", (4,), (-2, 2), ("value_and_gradient",), contexts=(((4,), signs),)),
    Row(F + "multilabel_soft_margin_loss", (2, 3), (-2, 2), ("gradient",),
        contexts=(((2, 3), lambda g, shape: g.integers(0, 2, size=shape)),)),
    Row(F + "cosine_embedding_loss", (2, 4), (-1, 1), ("value_and_gradient",),
        call=lambda f, x, y: f(x[:1], x[1:], y),
        contexts=(((1,), lambda g, shape: g.choice([1.0], size=shape)),)),
    Row(F + "margin_ranking_loss", (2, 4), (-1, 1), ("gradient",), kwargs={"margin": 3.0},
        call=lambda f, x, y, **kwargs: f(x[0], x[1], y, **kwargs), contexts=(((4,), signs),)),
    Row(F + "hinge_embedding_loss", (6,), (-0.5, 0.5), ("value_and_gradient",), contexts=(((6,), signs),)),
    Row(F + "triplet_margin_loss", (3, 4), (-1, 1), ("gradient",),
        call=lambda f, x: f(x[0:1], x[1:2], x[2:3], margin=5.0)),
    Row(F + "triplet_margin_with_distance_loss", (3, 4), (-1, 1), ("value_and_gradient",),
        call=lambda f, x: f(x[0:1], x[1:2], x[2:3], margin=5.0)),
    Row(F + "multi_margin_loss", (2, 4), (-1, 1), ("gradient",),
        call=lambda f, x: f(x, indices(x, (1, 3)), margin=5.0),
        skip=lacks(TORCH_FORWARD, "forward-mode derivative of multi_margin_loss")),
)
