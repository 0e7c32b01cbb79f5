"""jax-rev, jax-rev-jit, jax-fwd, jax-fwd-rev."""
from __future__ import annotations

import functools

from gradci.scenarios.backends.framework_backend import FrameworkBackend, block_until_ready
from gradci.scenarios.backends.functional import apply_operator, composes
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
PRIMAL_CULPRITS["forward-over-reverse"] = PRIMAL_CULPRITS["reverse"]  # the inner derivative runs the rules

FORWARD_OVER_REVERSE_NOTE = ("forward over reverse (jax.hessian = jacfwd of jacrev, jvp of grad): the reverse "
                             "pass differentiated in forward mode")


class JaxBackend(FrameworkBackend):
    framework = "jax"
    jit = False

    def __init__(self, name: str, mode: str, jit: bool = False, default: bool = True, composition: str | None = None,
                 composition_note: str = ""):
        self.name, self.mode, self.jit, self.default = name, mode, jit, default
        self.definition = composition or mode  # which of a record's compositions it runs
        self.primal_culprit = PRIMAL_CULPRITS[self.definition]
        self.composition_note = composition_note

    def computes(self, operator):
        return composes(self.definition, operator)

    def transforms(self):
        return jax_transforms()

    def operator_fn(self, operator, f, x, tangent):
        return apply_operator(jax_transforms(), self.definition, operator, f, x, tangent)

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
    # jax-fwd-rev: second order as users call it, jitted — jax.hessian (jacfwd of jacrev) and jvp of
    # grad — beside jax-rev-jit's reverse over reverse and jax-fwd's forward over forward. A custom_vjp
    # whose bwd jvp cannot go through passes both of those and breaks the first jax.hessian. Its mode
    # is its outer derivative's; it has no first-order cells (jax-fwd and jax-rev-jit check those).
    return [
        JaxBackend("jax-rev", "reverse", default=False),
        JaxBackend("jax-fwd", "forward", jit=True),
        JaxBackend("jax-rev-jit", "reverse", jit=True),
        JaxBackend("jax-fwd-rev", "forward", jit=True, composition="forward-over-reverse",
                   composition_note=FORWARD_OVER_REVERSE_NOTE),
    ]
