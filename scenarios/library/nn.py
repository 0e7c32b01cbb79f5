"""The neural-network family: one generic mechanism turns each layer record into a square-loss scenario.

Every layer is checked as training sees it: the gradient of sum((model(params, input) - target)^2)
with respect to the parameter pytree, with input and target as contexts. Parameters are drawn once in
numpy and handed to both frameworks, so the torch and jax losses are the same number.
"""
from __future__ import annotations

import math

import numpy as np

from gradci.scenarios.authoring.namespace import namespace
from gradci.scenarios.authoring.scenario import Scenario
from gradci.scenarios.library._common import derived, rng, scenario_name
from gradci.scenarios.library.nn_layers import LAYERS, MLP_100K, Layer

FAMILY = "nn"
# Second order through a dense layer, a chain and a recurrence: Hessian-vector products of losses are
# what Newton-type optimisers and influence functions need.
HVP_LAYERS = ("dense", "chain", "rnn")


def square_loss(forward):
    def loss(params, inputs, target, buffers=None):
        xp = namespace(params)
        return xp.sum((forward(params, inputs, buffers or {}) - target) ** 2)

    return derived(loss, forward)


MAX_ATTEMPTS = 100


def draw(layer: Layer) -> tuple[dict, np.ndarray, np.ndarray, dict]:
    """Parameters, input, target and buffers of a layer, from seeds named after it.

    Draws again, from the next seed, until the layer's ``valid`` predicate holds.
    """
    for attempt in range(MAX_ATTEMPTS):
        drawn = _draw_once(layer, rng(f"{FAMILY}/{layer.name}" + (f"/{attempt}" if attempt else "")))
        if layer.valid is None or layer.valid(drawn[0], drawn[1]):
            return drawn
    raise RuntimeError(f"layer {layer.name!r}: no valid point in {MAX_ATTEMPTS} draws")


def _draw_once(layer: Layer, g: np.random.Generator) -> tuple[dict, np.ndarray, np.ndarray, dict]:
    params = {}
    for name, spec in layer.params.items():
        fan_in = math.prod(spec.shape[1:]) if len(spec.shape) > 1 else 1
        scale = spec.scale if spec.scale is not None else 1 / math.sqrt(fan_in)
        params[name] = spec.loc + scale * g.standard_normal(spec.shape)
    inputs = g.standard_normal(layer.input_shape)
    target = 0.5 * g.standard_normal(layer.output_shape)
    buffers = {name: g.uniform(spec.low, spec.high, size=spec.shape) for name, spec in layer.buffers.items()}
    return params, inputs, target, buffers


def layer_scenario(layer: Layer, operator: str = "gradient", family: str = FAMILY,
                   tags: tuple[str, ...] = ()) -> Scenario:
    params, inputs, target, buffers = draw(layer)
    contexts = (inputs, target) + ((buffers,) if buffers else ())
    return Scenario(
        name=scenario_name(family, layer.name, operator),
        operator=operator,
        f={"torch": square_loss(layer.torch), "jax": square_loss(layer.jax)},
        x=params,
        contexts=contexts,
        tags=(FAMILY, "contexts", "per-framework", f"layer:{layer.name}") + tags,
    )


def scenarios() -> list[Scenario]:
    out = [layer_scenario(layer) for layer in LAYERS]
    out += [layer_scenario(layer, "hvp", tags=("second-order",)) for layer in LAYERS if layer.name in HVP_LAYERS]
    return out


def mlp_100k() -> Scenario:
    """A ~100k-parameter MLP: large enough that references come from random probes, not full matrices."""
    return layer_scenario(MLP_100K, family="large", tags=("large",))
