"""Complex x: the frameworks' conventions, the reference over (Re z, Im z), and planted rules caught."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gradci
from gradci import Scenario
from gradci._testing import planted
from gradci._testing.planted import Z
from gradci.scenarios.contract.errors import ScenarioInputError
from gradci.scenarios.numerics import complex_conventions
from gradci.scenarios.numerics.complex_parts import ComplexParts
from gradci.scenarios.reference.answer import ReferenceCache

TORCH = ["torch-rev", "torch-func-rev", "torch-func-fwd", "torch-fwd"]
JAX = ["jax-rev", "jax-rev-jit", "jax-fwd"]


def run(scenario, backends, dtypes=("float64",)):
    return gradci.check([scenario], backends=backends, devices=["cpu"], dtypes=list(dtypes))


def statuses(report):
    return {cell.backend: cell.status for cell in report.cells}


def square_loss(square):
    """Σ|square(z)|²: a real loss of a holomorphic rule, whose gradient goes through the rule's backward."""
    return lambda z: (abs(square(z)) ** 2).sum()


# -- the frameworks' conventions, as installed (what numerics.complex_conventions encodes) -----------
def test_torch_and_jax_gradients_of_a_real_function_are_conjugates():
    import jax
    import jax.numpy as jnp
    import torch

    expected = (2 * Z.real + 1) + 1j * (2 * Z.imag)  # L = Σ(a² + b² + a): ∂L/∂a + i ∂L/∂b
    torch_grad = torch.func.grad(lambda z: (z.abs() ** 2 + z.real).sum())(torch.tensor(Z)).numpy()
    jax_grad = np.asarray(jax.grad(lambda z: (jnp.abs(z) ** 2 + z.real).sum())(jnp.array(Z)))
    np.testing.assert_allclose(torch_grad, expected)
    np.testing.assert_allclose(jax_grad, np.conj(expected))
    assert not complex_conventions.CONVENTIONS["torch"].conjugated
    assert complex_conventions.CONVENTIONS["jax"].conjugated


def test_vjp_of_a_holomorphic_function_conjugates_in_torch_and_not_in_jax():
    import jax
    import jax.numpy as jnp
    import torch

    ct = np.array([0.7 + 0.2j, -0.4 + 1.1j, 0.1 - 0.9j])
    jax_vjp = np.asarray(jax.vjp(lambda z: z * z, jnp.array(Z))[1](jnp.array(ct))[0])
    torch_vjp = torch.func.vjp(lambda z: z * z, torch.tensor(Z))[1](torch.tensor(ct))[0].numpy()
    np.testing.assert_allclose(jax_vjp, ct * 2 * Z)
    np.testing.assert_allclose(torch_vjp, ct * np.conj(2 * Z))


def test_the_transforms_said_to_refuse_complex_inputs_do():
    # If a framework starts taking complex inputs here, the cells could take z itself: revisit REFUSING.
    import jax
    import jax.numpy as jnp
    import torch

    def pairs_t(z):
        return torch.stack([z.real, z.imag], -1)

    with pytest.raises(TypeError, match="jacfwd requires real-valued inputs"):
        jax.jacfwd(lambda z: jnp.stack([z.real, z.imag], -1))(jnp.array(Z))
    for transform in (torch.func.jacfwd, torch.func.jacrev):
        with pytest.raises(RuntimeError, match="Expected all inputs to be real"):
            transform(pairs_t)(torch.tensor(Z))


# -- the reference: f over (Re z, Im z) ------------------------------------------------------------
def test_the_reference_of_z_squared_is_its_real_jacobian():
    # f(z) = z², f'(z) = 2z: in pairs, d(Re f, Im f)/d(a, b) = [[2a, -2b], [2b, 2a]], zero across elements.
    scenario = Scenario("z^2", "jacobian", lambda z: z * z, Z, dtypes=("float64",))
    ref = ReferenceCache().answer(scenario).refs[0]
    expected = np.zeros((3, 2, 3, 2))
    for k, (a, b) in enumerate(zip(Z.real, Z.imag)):
        expected[k, :, k, :] = [[2 * a, -2 * b], [2 * b, 2 * a]]
    np.testing.assert_allclose(ref.full, expected, atol=1e-9)
    np.testing.assert_allclose(ref.value, np.stack([(Z * Z).real, (Z * Z).imag], -1))


def test_the_reference_gradient_of_a_real_function_is_d_da_and_d_db():
    scenario = Scenario("|z|^2", "gradient", lambda z: (z.real**2 + z.imag**2).sum(), Z, dtypes=("float64",))
    ref = ReferenceCache().answer(scenario).refs[0]
    np.testing.assert_allclose(ref.full, np.stack([2 * Z.real, 2 * Z.imag], -1), atol=1e-9)


def test_complex_x_is_kept_as_pairs_and_stays_complex_through_replace():
    scenario = Scenario("z^2", "jvp", lambda z: z * z, Z, tangent=np.ones(3) * 1j)
    assert scenario.x.shape == (3, 2) and scenario.complex_parts == ComplexParts((True,))
    np.testing.assert_array_equal(scenario.tangent, np.stack([np.zeros(3), np.ones(3)], -1))
    moved = dataclasses.replace(scenario, x=scenario.x * 1.01)
    assert moved.complex_parts == scenario.complex_parts and moved.x.shape == (3, 2)


def test_a_complex_x_is_not_fingerprinted_as_the_real_pairs_it_is_kept_as():
    def f(z):
        return z * z

    complex_x = Scenario("same", "jacobian", f, Z)
    real_pairs = Scenario("same", "jacobian", f, np.stack([Z.real, Z.imag], -1))
    assert complex_x.fingerprint() != real_pairs.fingerprint()
    assert complex_x.function_fingerprint() != real_pairs.function_fingerprint()


def test_second_order_on_complex_x_is_refused_with_what_to_do():
    with pytest.raises(ScenarioInputError, match="not hvp .*write f as a real function of"):
        Scenario("hvp", "hvp", lambda z: (abs(z) ** 2).sum(), Z)


def test_an_analytic_reference_or_sparsity_for_complex_x_is_refused_rather_than_misread():
    with pytest.raises(ScenarioInputError, match="reference for complex x is not supported yet"):
        Scenario("z^2", "jacobian", lambda z: z * z, Z, reference=np.diag(2 * Z))
    with pytest.raises(ScenarioInputError, match="sparsity for complex x"):
        Scenario("z^2", "jacobian", lambda z: z * z, Z, sparsity=np.eye(3, dtype=bool))


def test_complex_output_of_a_real_x_is_an_error_that_says_what_to_do():
    import torch

    scenario = Scenario("exp(ix)", "jacobian", {"torch": lambda x: torch.exp(1j * x)}, np.array([0.3, 0.5]))
    (cell,) = run(scenario, ["torch-rev"]).cells
    assert cell.status == "error"
    assert "complex values" in cell.message and "x + 0j" in cell.message


def test_half_precision_cells_of_complex_x_are_skipped_with_the_reason():
    scenario = Scenario("z^2", "jvp", lambda z: z * z, Z, dtypes=("float16",))
    (cell,) = run(scenario, ["torch-rev"], dtypes=("float16",)).cells
    assert cell.status == "skip" and "complex64 for float32" in cell.message


# -- every backend on complex x, with its convention recorded --------------------------------------
@pytest.mark.parametrize("operator", ["gradient", "jvp", "vjp", "jacobian"])
def test_every_backend_passes_complex_x_and_records_its_convention(operator):
    f = (lambda z: (abs(z) ** 2).sum() + z.real.sum()) if operator == "gradient" else (lambda z: z * z.real)
    report = run(Scenario(f"c/{operator}", operator, f, Z), [*JAX, *TORCH], dtypes=("float64", "float32"))
    assert {cell.status for cell in report.cells} == {"pass"}, [(c.backend, c.message) for c in report.failing()]
    conventions = {(cell.backend, cell.dtype): cell.precision for cell in report.cells}
    assert "x complex64" in conventions["jax-rev-jit", "float32"]
    if operator != "jvp":
        assert "jax convention" in conventions["jax-rev-jit", "float64"]
        assert "torch convention" in conventions["torch-rev", "float64"]
        assert "jax.jacfwd refuses" in conventions["jax-fwd", "float64"]


# -- planted rules: each fails, its twin passes ----------------------------------------------------
@pytest.mark.parametrize("operator", ["gradient", "vjp"])
def test_a_torch_backward_that_forgets_the_conjugate_fails_and_its_twin_passes(operator):
    def scenario(square):
        f = square_loss(square) if operator == "gradient" else square
        return Scenario(f"z^2/{operator}", operator, {"torch": f}, Z)

    reverse = ["torch-rev", "torch-func-rev"]
    assert statuses(run(scenario(planted.torch_complex_square()), reverse)) == {b: "pass" for b in reverse}
    bad = run(scenario(planted.torch_complex_square(conjugate_in_backward=False)), reverse)
    assert statuses(bad) == {b: "fail" for b in reverse}
    assert "(real, imaginary) pairs" in bad.cells[0].message


def test_a_jax_bwd_that_conjugates_a_holomorphic_derivative_fails_and_its_twin_passes():
    def scenario(square):
        return Scenario("z^2/jax-vjp", "vjp", {"jax": square}, Z)

    assert statuses(run(scenario(planted.jax_complex_square_vjp()), ["jax-rev-jit"])) == {"jax-rev-jit": "pass"}
    bad = run(scenario(planted.jax_complex_square_vjp(conjugate_in_bwd=True)), ["jax-rev-jit"])
    assert statuses(bad) == {"jax-rev-jit": "fail"}


@pytest.mark.parametrize("operator", ["jvp", "jacobian"])
def test_a_jax_jvp_rule_that_conjugates_the_tangent_fails_and_its_twin_passes(operator):
    # jvp takes z and a complex tangent; jax.jacfwd's Jacobian runs over (Re z, Im z), tangents 1 and i.
    def scenario(square):
        return Scenario(f"z^2/jax-{operator}", operator, {"jax": square}, Z)

    assert statuses(run(scenario(planted.jax_complex_square_jvp()), ["jax-fwd"])) == {"jax-fwd": "pass"}
    bad = run(scenario(planted.jax_complex_square_jvp(conjugate_tangent=True)), ["jax-fwd"])
    assert statuses(bad) == {"jax-fwd": "fail"}


def test_a_real_valued_gradient_in_the_other_frameworks_convention_fails_and_its_twin_passes():
    def scenario(convention):
        return Scenario("|z|^2", "gradient", {"torch": planted.torch_squared_modulus(convention)}, Z)

    assert statuses(run(scenario("torch"), ["torch-rev"])) == {"torch-rev": "pass"}
    assert statuses(run(scenario("jax"), ["torch-rev"])) == {"torch-rev": "fail"}


def test_a_convention_table_that_reads_jax_as_torch_fails_jax_cells(monkeypatch):
    # gradci's own table is a claim too: read jax's gradient as if it were torch's and jax's cells fail.
    scenario = Scenario("|z|^2+Re", "gradient", lambda z: (abs(z) ** 2).sum() + z.real.sum(), Z)
    assert statuses(run(scenario, ["jax-rev-jit"])) == {"jax-rev-jit": "pass"}
    wrong = dataclasses.replace(complex_conventions.CONVENTIONS["jax"], conjugated=False)
    monkeypatch.setitem(complex_conventions.CONVENTIONS, "jax", wrong)
    assert statuses(run(scenario, ["jax-rev-jit"])) == {"jax-rev-jit": "fail"}


def test_complex_and_real_arguments_through_wrt_with_a_complex_context_pass_every_backend():
    # a and c complex, b real; c held fixed is a complex context, cast to each cell's complex dtype.
    r, w = np.array([0.4, 0.9, 1.3]), np.array([0.3 - 0.2j, 1.1 + 0.1j, -0.6 + 0.8j])
    scenario = Scenario("wrt", "vjp", lambda a, b, c: a * b + c * a, (Z, r, w), wrt=(0, 1))
    assert scenario.complex_parts == ComplexParts((True, False)) and scenario.contexts[0].dtype == np.complex128
    report = run(scenario, [*JAX, *TORCH], dtypes=("float64", "float32"))
    assert {cell.status for cell in report.cells} == {"pass"}, [(c.backend, c.message) for c in report.failing()]


def test_a_real_tangent_of_complex_x_is_its_real_direction():
    """A real tangent for complex z reads as t + 0i (it was split as a real array, half x's pairs, and
    every cell errored with a broadcast error)."""
    real, complex_ = (Scenario(f"z2-{kind}", "jvp", lambda z: z * z, Z, tangent=t)
                      for kind, t in (("real", np.ones(Z.shape)), ("complex", np.ones(Z.shape) + 0j)))
    assert np.array_equal(real.tangent, complex_.tangent)
    cells = gradci.check([real], backends=TORCH + JAX, devices=["cpu"], dtypes=["float64"],
                         references=ReferenceCache()).cells
    assert {c.status for c in cells} == {"pass"}, [(c.backend, c.message) for c in cells if c.status != "pass"]


def test_a_real_cotangent_of_a_complex_output_is_read_as_t_plus_0i():
    """A real cotangent for complex f(z) weighs Re f, as a real tangent of complex z is t + 0i (it was kept
    real, half the size of f's pairs, and every cell errored with a matmul error)."""
    real, complex_ = (Scenario(f"z2-ct-{kind}", "vjp", lambda z: z * z, Z, tangent=t)
                      for kind, t in (("real", np.array([1.0, -0.5, 2.0])), ("complex", np.array([1.0, -0.5, 2.0]) + 0j)))
    cache = ReferenceCache()
    read_real, read_complex = cache.answer(real).tangent, cache.answer(complex_).tangent
    assert read_real.shape == (3, 2) and np.array_equal(read_real, read_complex)
    cells = gradci.check([real], backends=TORCH + JAX, devices=["cpu"], dtypes=["float64"], references=cache).cells
    assert {c.status for c in cells} == {"pass"}, [(c.backend, c.message) for c in cells if c.status != "pass"]


def test_a_complex_cotangent_of_the_wrong_shape_is_named_as_given():
    scenario = Scenario("z2-ct-wrong", "vjp", lambda z: z * z, Z, tangent=np.ones(2) + 1j)
    (cell,) = run(scenario, ["torch-rev"]).cells
    assert cell.status == "error" and "expected complex (3,); got complex (2,)" in cell.message, cell.message


def test_a_complex128_output_in_a_complex64_cell_is_noted_by_its_complex_dtypes():
    import torch

    wide = torch.tensor([1 + 1j, 2 - 1j, 0.5j], dtype=torch.complex128)  # promotes complex64 z
    scenario = Scenario("z*c128", "jvp", {"torch": lambda z: z * wide}, Z)
    (cell,) = run(scenario, ["torch-rev"], dtypes=("float32",)).cells
    assert cell.status == "pass" and "note: f returns complex128 (or float64) for complex64 inputs" in cell.message
