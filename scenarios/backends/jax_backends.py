"""jax-rev, jax-rev-jit, jax-fwd."""
from __future__ import annotations

import functools

from gradci.scenarios.backends.framework_backend import FrameworkBackend, block_until_ready
from gradci.scenarios.backends.functional import apply_operator
from gradci.scenarios.operators.vocabulary import Transforms


@functools.cache
def jax_transforms() -> Transforms:
    from gradci.scenarios.adapters import get_framework

    get_framework("jax")  # enables x64 before anything else touches jax
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    return Transforms(
        name="jax", grad=jax.grad, value_and_grad=jax.value_and_grad, jacrev=jax.jacrev, jacfwd=jax.jacfwd,
        jvp=jax.jvp, vjp=jax.vjp, ravel=ravel_pytree,
        ones_like=lambda tree: jax.tree_util.tree_map(jnp.ones_like, tree),
        zeros_like=lambda tree: jax.tree_util.tree_map(jnp.zeros_like, tree),
        cast_like=lambda tree, like: jax.tree_util.tree_map(lambda a, b: a.astype(b.dtype), tree, like),
    )


# What makes the primal a jax transform returns differ from f(x), by the mode that returned it: jax
# differentiates a custom_vjp through its fwd, and a custom_jvp through its rule, whose primal output
# it takes as f(x) (reverse mode linearises the rule too).
PRIMAL_CULPRITS = {
    "reverse": "a custom_vjp whose fwd returns another value than the function (or a custom_jvp rule whose "
               "primal output is not f(x))?",
    "forward": "a custom_jvp rule whose primal output is not f(x)?",
}


class JaxBackend(FrameworkBackend):
    framework = "jax"
    jit = False

    def __init__(self, name: str, mode: str, jit: bool = False, default: bool = True):
        self.name, self.mode, self.jit, self.default = name, mode, jit, default
        self.definition = mode
        self.primal_culprit = PRIMAL_CULPRITS[mode]

    def transforms(self):
        return jax_transforms()

    def operator_fn(self, operator, f, x, tangent):
        return apply_operator(jax_transforms(), self.mode, operator, f, x, tangent)

    def compile(self, computation):
        if not self.jit:
            return computation
        import jax

        return jax.jit(computation)

    def compiles(self):
        return self.jit

    def result_ready(self, result):
        return block_until_ready(result)


def jax_backends() -> list[JaxBackend]:
    # jax-rev runs op by op, as code outside jit does; forward mode is compiled, as it runs in practice
    # (and op-by-op jacfwd/hessian compiles every primitive on first use: seconds per cell). jax-rev
    # checks the rules jax-rev-jit checks compiled, at more than the two jitted backends' cost
    # together (bench/RESULTS.md, References): opt-in, for functions jit cannot trace.
    return [
        JaxBackend("jax-rev", "reverse", default=False),
        JaxBackend("jax-fwd", "forward", jit=True),
        JaxBackend("jax-rev-jit", "reverse", jit=True),
    ]
