"""The typed seams between the layers: one ``Status`` for the engine and the server, the runner's
messages shared by both ends, an unconfigured worker refusing to guess, and the stored cell's columns
spelled out for type checkers exactly as the contract derives them."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from gradci.scenarios.contract.cell import FIELDS, STATUSES, Cell, Status
from gradci.services.db import models
from gradci.worker import context, runner_messages


def test_the_server_and_the_engine_share_one_status() -> None:
    assert models.CellStatus is Status
    assert Status.values() == STATUSES == ("pass", "fail", "error", "skip", "xfail", "xpass")
    assert Status.PASS == "pass" and f"{Status.XPASS}" == "xpass" and str(Status.SKIP) == "skip"
    assert json.dumps({Status.FAIL: Status.ERROR}) == '{"fail": "error"}'
    assert isinstance(models.RunStatus.passed, str) and str(models.RunStatus.passed) == "passed"


def test_a_cells_status_is_stored_and_serialised_as_its_word() -> None:
    cell = Cell(scenario="s", operator="gradient", framework="numpy", backend="fd", mode="finite", device="cpu",
                dtype="float64", status=Status.XFAIL)
    assert json.loads(json.dumps(cell.to_dict()))["status"] == "xfail"


@pytest.mark.parametrize("request_", [
    runner_messages.ListRequest(source="/repo", family=None, availability=True),
    runner_messages.WarmRequest(backends=["jax-rev", "fd"]),
    runner_messages.CellsRequest(scenario="s", backends=["fd"], devices=["cpu"], dtypes=["float64"], peers=["jax-fwd"],
                                 options={"repeats": 2}),
])
def test_requests_cross_the_wire_unchanged(request_) -> None:
    line = runner_messages.request_to_json(request_)
    assert json.loads(line)["op"] == request_.op
    assert runner_messages.parse_request(line) == request_


@pytest.mark.parametrize("answer", [
    runner_messages.ListReply(scenarios=[], backends=[{"name": "fd", "framework": "numpy", "mode": "finite"}], file_matrix={},
                              devices=["cpu"], rss_bytes=1 << 20),
    runner_messages.WarmReply(unavailable={"jax-rev": None}, device_memory={"torch_applied": False}, rss_bytes=None),
    runner_messages.CellsReply(cells=[{"scenario": "s", "status": "pass"}], restart="device out of memory", rss_bytes=3),
])
def test_answers_cross_the_wire_unchanged(answer) -> None:
    assert runner_messages.parse_answer(answer.to_json(), type(answer)) == answer


def test_the_runners_other_lines_are_told_apart() -> None:
    assert runner_messages.parse_answer(runner_messages.Ready(pid=7, rss_bytes=1).to_json(), runner_messages.CellsReply) == runner_messages.Ready(pid=7, rss_bytes=1)
    assert runner_messages.parse_answer(runner_messages.Beat().to_json(), runner_messages.CellsReply) == runner_messages.Beat()
    assert runner_messages.parse_answer(runner_messages.Refusal(error="no").to_json(), runner_messages.ListReply) == runner_messages.Refusal(error="no")
    with pytest.raises(runner_messages.ProtocolError, match="unknown request 'zap'"):
        runner_messages.parse_request('{"op": "zap"}')
    with pytest.raises(runner_messages.ProtocolError):
        runner_messages.parse_answer('{"ok": true, "cells": [], "surprise": 1}', runner_messages.CellsReply)


def test_the_messages_module_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(runner_messages.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module}
    assert imported <= {"__future__", "dataclasses", "json", "typing"}


def test_an_unconfigured_worker_refuses_to_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "_configured", None)
    with pytest.raises(context.NotConfigured, match=r"configure\("):
        context.current()


def test_the_stored_cells_typed_columns_are_the_contracts_fields() -> None:
    """``Result``'s ``TYPE_CHECKING`` block names each Cell field once, in order, with its stored type."""
    tree = ast.parse(Path(models.__file__).read_text())
    result = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Result")
    block = next(node for node in result.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    declared = [(node.target.id, ast.unparse(node.annotation)) for node in block.body
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)]
    stored = {"Status": "str"}  # a vocabulary's word is stored as a string
    assert declared == [(field.name, f"Mapped[{stored.get(str(field.type), field.type)}]") for field in FIELDS]
