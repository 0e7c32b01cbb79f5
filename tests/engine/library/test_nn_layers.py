"""The neural-network rows beyond DIT's Flux layers: each passes every backend in float64 and float32,
and a hand-written backward with the bug people write for it fails where it is used."""
from __future__ import annotations

import dataclasses

import pytest

import gradci
from gradci.scenarios.library.nn import layer_scenario
from gradci.scenarios.library.nn_layers import LAYERS, MOMENTUM, Layer

NEW_LAYERS = ("conv-maxpool", "relu-mlp", "group-norm", "instance-norm", "batch-norm-training", "conv-batch-norm",
              "conv-same-gelu", "conv-stack", "lstm-stack")
TORCH_REVERSE = ["torch-rev"]  # the hand-written Functions below are not in setup_context style


def layer(name: str) -> Layer:
    return next(layer for layer in LAYERS if layer.name == name)


def test_every_new_layer_passes_every_backend_in_float64_and_float32():
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    report = gradci.check([layer_scenario(layer(name)) for name in NEW_LAYERS], devices=["cpu"],
                          dtypes=["float64", "float32"])
    bad = [f"{c.scenario} {c.backend} {c.dtype}: {c.status} {c.message}" for c in report.cells
           if c.status not in ("pass", "skip")]
    assert not bad, "\n".join(bad)
    assert report.counts()["pass"] >= 12 * len(NEW_LAYERS)  # 6 differentiating backends × 2 dtypes each


def batch_norm_without_statistics_gradient(planted: bool):
    """Training-mode BatchNorm as a torch.autograd.Function with a hand-written backward.

    Planted: the backward treats the batch mean and variance as constants (the classic mistake: they
    depend on every element of the batch). The correct backward keeps their terms. After a
    convolution, as in the conv-batch-norm row: the mistake is in the gradient with respect to the
    normalised input, which reaches the parameters only through a layer before it.
    """
    import torch

    axes = (0, 2, 3)

    class BatchNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, gamma, beta):
            mean, var = x.mean(dim=axes, keepdim=True), x.var(dim=axes, unbiased=False, keepdim=True)
            inv_std = 1 / torch.sqrt(var + 1e-5)
            normalised = (x - mean) * inv_std
            ctx.save_for_backward(normalised, inv_std, gamma)
            return normalised * gamma[None, :, None, None] + beta[None, :, None, None]

        @staticmethod
        def backward(ctx, grad):
            normalised, inv_std, gamma = ctx.saved_tensors
            g = grad * gamma[None, :, None, None]
            if planted:
                grad_x = g * inv_std
            else:
                grad_x = inv_std * (g - g.mean(dim=axes, keepdim=True)
                                    - normalised * (g * normalised).mean(dim=axes, keepdim=True))
            return grad_x, (grad * normalised).sum(dim=axes), grad.sum(dim=axes)

    def forward(p, x, buffers):
        return torch.tanh(BatchNorm.apply(torch.nn.functional.conv2d(x, p["w"], p["b"]), p["gamma"], p["beta"]))

    return forward


def max_pool_routing_to_the_first_element(planted: bool):
    """Max-pooling with a hand-written backward; planted: the gradient goes to each window's first element."""
    import torch

    class MaxPool(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y):
            pooled, index = torch.nn.functional.max_pool2d(y, 2, return_indices=True)
            ctx.save_for_backward(index)
            ctx.shape = y.shape
            return pooled

        @staticmethod
        def backward(ctx, grad):
            (index,) = ctx.saved_tensors
            if planted:
                width = ctx.shape[-1]
                row, column = index // width, index % width
                index = (row - row % 2) * width + (column - column % 2)
            return torch.nn.functional.max_unpool2d(grad, index, 2, output_size=ctx.shape[-2:])

    def forward(p, x, buffers):
        conv = torch.tanh(torch.nn.functional.conv2d(x, p["w"], p["b"]))
        return MaxPool.apply(conv)

    return forward


@pytest.mark.parametrize("planted", [False, True], ids=["correct", "planted"])
@pytest.mark.parametrize(("name", "make"), [("conv-batch-norm", batch_norm_without_statistics_gradient),
                                            ("conv-maxpool", max_pool_routing_to_the_first_element)])
def test_a_hand_written_backward_with_the_usual_bug_fails_and_its_twin_passes(name, make, planted):
    pytest.importorskip("torch")
    hand_written = dataclasses.replace(layer(name), torch=make(planted))
    report = gradci.check([layer_scenario(hand_written)], backends=TORCH_REVERSE, devices=["cpu"],
                          dtypes=["float64", "float32"])
    statuses = {(c.backend, c.dtype): c.status for c in report.cells}
    expected = "fail" if planted else "pass"
    assert set(statuses.values()) == {expected}, {key: (c.status, c.message) for key, c in
                                                  zip(statuses, report.cells)}


def test_training_mode_batch_norm_updates_its_running_statistics_on_copies_only():
    # The running statistics move (training mode) but the scenario's buffers, its contexts, do not:
    # each evaluation starts from the same state, and the update is not differentiated.
    torch = pytest.importorskip("torch")
    s = layer_scenario(layer("batch-norm-training"))
    params, inputs, _, buffers = s.x, *s.contexts
    before = {name: value.copy() for name, value in buffers.items()}
    mean = torch.tensor(buffers["mean"])
    x = torch.tensor(inputs)
    torch.nn.functional.batch_norm(x, mean, torch.tensor(buffers["var"]), torch.tensor(params["gamma"]),
                                   torch.tensor(params["beta"]), training=True, momentum=MOMENTUM)
    assert not torch.allclose(mean, torch.tensor(before["mean"]))  # control: training mode moves them
    layer("batch-norm-training").torch({k: torch.tensor(v) for k, v in params.items()}, x,
                                       {k: torch.tensor(v) for k, v in buffers.items()})
    assert all((buffers[name] == before[name]).all() for name in buffers)
