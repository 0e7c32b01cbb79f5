"""A fingerprint covers everything a scenario's function reads, at any depth: two scenarios that
differ only deep inside what their function reads never share a reference or f's evaluations, and
a function whose state cannot be read is never shared at all."""
from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import gradci
from gradci import Scenario
from gradci._testing import planted
from gradci.scenarios.authoring.fingerprints import _source_of, fingerprint_of, walks_shared
from gradci.scenarios.reference.answer import ReferenceCache


class Box:
    def __init__(self, content):
        self.content = content


class Layer:
    __slots__ = ("weights",)

    def __init__(self, weights):
        self.weights = weights


class Model:
    def __init__(self, layers):
        self.layers = layers  # a list of layer objects, as plain-Python models hold them

    def __call__(self, x):
        xp = gradci.namespace(x)
        for layer in self.layers:
            # model → list → Layer (slots) → dict → Box → Box → the array: six levels down
            w = layer.weights["scale"].content.content
            x = xp.tanh(x * xp.asarray(w, dtype=x.dtype))
        return xp.sum(x ** 2)


def deep_model(seed: int) -> Model:
    rng = np.random.default_rng(seed)
    return Model([Layer({"scale": Box(Box(rng.uniform(0.5, 1.5, 3)))}) for _ in range(2)])


def scenario_of(model: Model) -> Scenario:
    # One factory, one name: only the weights, six levels deep, tell the two scenarios apart.
    return Scenario("factory/deep", "gradient", lambda x: model(x), np.array([0.3, -0.2, 0.7]))


def test_weights_six_levels_deep_change_the_fingerprint():
    a, b, a_again = scenario_of(deep_model(0)), scenario_of(deep_model(1)), scenario_of(deep_model(0))
    assert a.fingerprint() != b.fingerprint()
    assert a.function_fingerprint() != b.function_fingerprint()
    assert a.fingerprint() == a_again.fingerprint()  # stable: equal contents, equal fingerprints


def test_twins_sharing_one_cache_are_each_checked_against_their_own_reference():
    shared = ReferenceCache()
    for seed in (0, 1):
        report = gradci.check([scenario_of(deep_model(seed))], backends=["torch-rev", "jax-rev"], devices=["cpu"],
                              dtypes=["float64"], references=shared)
        assert report.ok, report.failing()


class Config:
    """A context whose repr leaves out what decides f: its scale."""

    def __init__(self, scale):
        self.scale = scale

    def __repr__(self):
        return "Config()"


def scaled_square(x, config):
    return gradci.namespace(x).sum(config.scale * x ** 2)


def test_contexts_are_read_whole_not_by_their_repr():
    def made(scale):  # one factory, one name: only the context's state tells them apart
        return Scenario("factory/config", "gradient", scaled_square, np.array([0.3, -0.2, 0.7]),
                        contexts=(Config(scale),))

    one, two = made(1.0), made(2.0)
    assert one.fingerprint() != two.fingerprint() and one.function_fingerprint() != two.function_fingerprint()
    assert one.cache_key() == made(1.0).cache_key()  # equal contents are still shared
    shared = ReferenceCache()
    for scenario in (one, two):  # against the other's reference, a correct backend would fail
        report = gradci.check([scenario], backends=["torch-rev"], devices=["cpu"], dtypes=["float64"],
                              references=shared)
        assert report.ok, report.failing()


def test_an_object_context_that_cannot_be_read_is_never_shared():
    class Opaque:  # no attributes to read (a C extension's handle, say): what it holds is unknown
        __slots__ = ()

    def made():
        return Scenario("opaque", "gradient", lambda x, handle: (x ** 2).sum(), np.ones(2), contexts=(Opaque(),))

    first, second = made(), made()
    assert first.cache_key() != second.cache_key()
    assert first.function_fingerprint() != second.function_fingerprint()


def test_a_global_the_function_reads_is_part_of_it():
    namespace: dict = {"np": np, "WEIGHT": np.array([1.0, 2.0])}
    exec("def f(x):\n    return np.sum(WEIGHT * x)", namespace)
    before = fingerprint_of(namespace["f"])
    namespace["WEIGHT"] = np.array([1.0, 3.0])
    assert fingerprint_of(namespace["f"]) != before


def test_cycles_end_and_equal_cycles_hash_equal():
    def ring(value):
        first = Box(None)
        first.content = [Box(np.array([value])), first]
        return first
    assert fingerprint_of(ring(1.0)) == fingerprint_of(ring(1.0))
    assert fingerprint_of(ring(1.0))[0] != fingerprint_of(ring(2.0))[0]


def boxes(values: list[int], edges: list[list[int]]) -> list[Box]:
    """A graph of boxes: box i holds values[i] and the boxes edges[i] names (cycles and shared parts)."""
    nodes = [Box(None) for _ in values]
    for node, value, targets in zip(nodes, values, edges):
        node.content = [value, *(nodes[target % len(nodes)] for target in targets)]
    return nodes


graphs = st.integers(1, 9).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 2), min_size=n, max_size=n),
    st.lists(st.lists(st.integers(0, n - 1), max_size=3), min_size=n, max_size=n),
    st.permutations(range(n))))


@given(graphs)
@hypothesis_settings(max_examples=300, deadline=None)
def test_walks_shared_give_each_fingerprint_as_alone(graph):
    """Fingerprints computed sharing their walks (a listing's) are those computed one by one, whatever the order.

    Graphs with cycles, shared parts and unreadable objects: a summary kept from one walk is only reused
    where it is the same as walking again, or a scenario's fingerprint would depend on its neighbours.
    """
    values, edges, order = graph
    nodes = boxes(values, edges)
    nodes[0].lock = threading.Lock()  # unreadable: incomplete, and so is whatever reaches it
    alone = {index: fingerprint_of(nodes[index]) for index in order}
    with walks_shared():
        shared = {index: fingerprint_of(nodes[index]) for index in order}
    assert shared == alone
    again = boxes(values, edges)  # an equal graph of other objects: the same fingerprints
    again[0].lock = threading.Lock()
    assert {index: fingerprint_of(again[index]) for index in order} == alone


@given(graphs, st.integers(0, 8))
@hypothesis_settings(max_examples=200, deadline=None)
def test_a_value_reached_changes_the_fingerprint_shared_or_not(graph, changed):
    """Any value a box reaches, however far round a cycle, moves its fingerprint, shared walks or not."""
    values, edges, order = graph
    changed %= len(values)
    moved = [v + 10 if i == changed else v for i, v in enumerate(values)]
    before, after = boxes(values, edges), boxes(moved, edges)
    for index in order:
        reaches = _reached(edges, index, len(values))
        with walks_shared():
            one, other = fingerprint_of(before[index]), fingerprint_of(after[index])
        assert (one != other) == (changed in reaches), (index, reaches)


def _reached(edges: list[list[int]], start: int, n: int) -> set[int]:
    found, todo = {start}, [start]
    while todo:
        for target in edges[todo.pop()]:
            if target % n not in found:
                found.add(target % n)
                todo.append(target % n)
    return found


def test_what_cannot_be_read_is_never_shared():
    lock = threading.Lock()  # a C object with no attributes: what it holds is unknown
    digest, complete = fingerprint_of(lock)
    assert not complete

    def f(x, lock=lock):
        return (x ** 2).sum()
    one, two = (Scenario("opaque", "gradient", f, np.array([1.0, 2.0])) for _ in range(2))
    assert one.fingerprint() == two.fingerprint()      # stable, so reports can still compare runs
    assert one.cache_key() != two.cache_key()          # but never shared through the cache
    assert one.function_fingerprint() != two.function_fingerprint()  # nor through the memo


@pytest.mark.parametrize("capture", ["torch module", "equinox-like object", "jitted function"])
def test_framework_objects_are_read_by_content(capture):
    torch = pytest.importorskip("torch")
    import jax
    import jax.numpy as jnp

    def make(seed):
        torch.manual_seed(seed)
        if capture == "torch module":
            return torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh())
        if capture == "equinox-like object":
            return Box({"w": jnp.asarray(np.random.default_rng(seed).normal(size=3))})
        w = jnp.asarray(np.random.default_rng(seed).normal(size=3))
        return jax.jit(lambda x: jnp.sum(w * x))
    assert fingerprint_of(make(0)) != fingerprint_of(make(1))
    assert fingerprint_of(make(0)) == fingerprint_of(make(0))
    assert fingerprint_of(make(0))[1]  # completely read


def test_registries_of_the_frameworks_a_function_calls_leave_its_fingerprint_alone(monkeypatch):
    """A torch autograd.Function's ``apply`` is torch's function; the globals of its module are the
    process's state (the pytree types any import registered, dispatch caches), not the scenario's.
    Read, they made the fingerprint, and the probe directions it seeds, depend on which tests ran
    earlier in the process: now and then a probe along which a planted 1% error cancels."""
    pytest.importorskip("torch")
    import torch.utils._pytree as pytree

    def made(scale):
        return Scenario("rule/torch", "gradient", planted.loss_with(planted.torch_sin(backward_scale=scale)),
                        planted.X)

    before = made(1.01).fingerprint()

    class RegisteredElsewhere:  # as importing torch.distributed.tensor registers its types
        pass

    monkeypatch.setitem(pytree.SUPPORTED_NODES, RegisteredElsewhere, next(iter(pytree.SUPPORTED_NODES.values())))
    assert made(1.01).fingerprint() == before
    assert made(1.0).fingerprint() != before  # what the rule was made with still counts


def test_what_a_framework_function_was_handed_is_still_read():
    torch = pytest.importorskip("torch")

    def weighted(w):
        return lambda x: (w * x).sum()

    ones, twos = torch.ones(3), torch.full((3,), 2.0)
    # torch.func.grad's wrapper is torch's function; the function and weights it closes over are not
    assert fingerprint_of(torch.func.grad(weighted(ones))) != fingerprint_of(torch.func.grad(weighted(twos)))
    assert fingerprint_of(torch.func.grad(weighted(ones))) == fingerprint_of(torch.func.grad(weighted(ones)))


class Solver:
    """A library class every scenario's function reaches, as an ODE solver's classes are."""

    def step(self, x):
        return x * 0.5


def test_scenarios_sharing_a_library_read_each_objects_source_once(monkeypatch) -> None:
    """A project's scenarios walk the same library: each class's and function's source is read once in
    the process, not once per scenario (inspect parses a class's whole module on each read: a listing of
    20 ODE scenarios spent 10 s there)."""
    from gradci.scenarios.authoring import fingerprints

    reads: list[object] = []

    def counted(real):
        def read(obj):
            reads.append(obj)
            return real(obj)
        return read

    # a function's source is read by inspect, a class's by the module's own reader
    monkeypatch.setattr(inspect, "getsource", counted(inspect.getsource))
    monkeypatch.setattr(fingerprints, "_class_source", counted(fingerprints._class_source))
    solver = Solver()

    def make(scale):
        def f(x):
            return (solver.step(x) * scale).sum()
        return f

    prints = [Scenario(f"s{i}", "gradient", make(float(i)), np.ones(2)).fingerprint() for i in range(5)]
    assert len(set(prints)) == 5  # each scenario its own (its scale differs)
    assert reads.count(Solver) == 1 and reads.count(Solver.step) == 1, reads



def test_a_listings_scenarios_walk_their_library_once(monkeypatch) -> None:
    """Inside ``walks_shared`` (a listing), a library object every scenario reaches is walked once in all,
    and each scenario's fingerprint is the one it has alone."""
    from gradci.scenarios.authoring import fingerprints

    walked: list[object] = []
    real = fingerprints._hash

    def counted(obj, h):
        walked.append(obj)
        return real(obj, h)

    solver = Solver()

    def make(scale):
        def f(x):
            return (solver.step(x) * scale).sum()
        return f

    def scenarios():
        return [Scenario(f"s{i}", "gradient", make(float(i)), np.ones(2)) for i in range(5)]

    alone = [s.fingerprint() for s in scenarios()]
    monkeypatch.setattr(fingerprints, "_hash", counted)
    with walks_shared():
        shared = [s.fingerprint() for s in scenarios()]
    assert shared == alone
    assert walked.count(Solver) == 1 and walked.count(solver) == 1, walked.count(Solver)


def test_only_code_whose_version_every_cell_records_is_named_unread() -> None:
    """A package whose code a fingerprint names without reading must be one whose version every cell's
    environment records: a change in it then re-runs every cell. Any other library's code is read, or a
    change in it would carry cells that ran it."""
    from gradci.scenarios.affected.environment import PACKAGES
    from gradci.scenarios.authoring import fingerprints

    named = fingerprints._ENVIRONMENT - set(sys.stdlib_module_names) - {"builtins"}
    assert named <= set(PACKAGES), named - set(PACKAGES)


def test_a_scenario_reaching_scipy_reads_none_of_its_source(monkeypatch) -> None:
    """scipy's version is the environment's: its classes and functions are named, not read (torchdiffeq's
    scipy solver reaches scipy.integrate's: reading them was a third of a pull request's listing)."""
    from scipy.integrate import RK45, solve_ivp  # the function and the class themselves, as torchdiffeq holds them

    from gradci.scenarios.authoring import fingerprints

    read: list[object] = []
    real = fingerprints._source_of
    monkeypatch.setattr(fingerprints, "_source_of", lambda obj: read.append(obj) or real(obj))

    def f(x):
        return solve_ivp(lambda t, y: -y, (0.0, 1.0), x, method=RK45).y[:, -1].sum()

    Scenario("scipy/ode", "gradient", f, np.ones(2)).fingerprint()
    assert read and not [obj for obj in read if getattr(obj, "__module__", "").startswith("scipy")], read

CLASSES = '''\
import functools


class Outer:
    """A class with classes inside."""

    class Inner:
        def method(self):
            class InMethod:
                pass
            return InMethod

    # a comment at the body's depth, which inspect keeps


@functools.total_ordering
@(lambda cls: cls)
class Decorated(
    object,
):
    def __lt__(self, other):
        return False


def factory():
    @functools.total_ordering
    class Made:
        def __lt__(self, other):
            return True
    return Made


if True:
    try:
        class Guarded:
            x = 1
    except ImportError:
        pass

if False:
    class Twice:
        a = 1
else:
    class Twice:
        b = 2

Made = factory()
InMethod = Outer.Inner().method()
'''


def load_module(path, name, text, monkeypatch):
    """Write ``text`` to ``path`` and import it as module ``name`` (as a project's library is)."""
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def test_a_class_source_is_the_text_inspect_gives(tmp_path, monkeypatch):
    """Nested classes, decorated ones, classes in functions, in if/try blocks, or defined twice: inspect's text."""
    module = load_module(tmp_path / "fp_classes.py", "fp_classes", CLASSES, monkeypatch)
    classes = [module.Outer, module.Outer.Inner, module.InMethod, module.Decorated, module.Made, module.Guarded,
               module.Twice]
    for cls in classes:
        assert _source_of(cls) == inspect.getsource(cls), cls.__qualname__
    assert _source_of(module.Decorated).startswith("@functools.total_ordering\n@(lambda")  # from its decorators
    assert "# a comment at the body's depth" in _source_of(module.Outer)


def test_a_module_is_parsed_once_for_all_its_classes(tmp_path, monkeypatch):
    """A listing walks many classes of one library module: the module is parsed once, not once per class."""
    module = load_module(tmp_path / "fp_parsed_once.py", "fp_parsed_once", CLASSES, monkeypatch)
    parses: list[str] = []
    real = ast.parse

    def counted(source, *args, **kwargs):
        parses.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counted)
    for cls in (module.Outer, module.Outer.Inner, module.InMethod, module.Decorated, module.Made, module.Guarded):
        assert "class" in _source_of(cls)
    assert len(parses) == 1


def test_a_class_of_an_edited_file_is_read_from_its_new_text(tmp_path, monkeypatch):
    """A module edited and imported again in the process: its classes' source is the new text, not the parse cached."""
    path = tmp_path / "fp_edited.py"
    before = load_module(path, "fp_edited", "class Solver:\n    order = 1\n", monkeypatch)
    assert _source_of(before.Solver) == "class Solver:\n    order = 1\n"
    after = load_module(path, "fp_edited", "import math\n\n\nclass Solver:\n    order = math.pi\n", monkeypatch)
    assert _source_of(after.Solver) == "class Solver:\n    order = math.pi\n" == inspect.getsource(after.Solver)
