"""The CPU–GPU agreement cell of a GPU cell, as the runner is asked for it.

See ``gradci.scenarios.verdict.device_agreement``: the engine checks a device named ``<gpu>-vs-cpu``
by comparing that GPU's results with the CPU's, and the runner answers exactly the cells its request
lists.
"""
from __future__ import annotations

import dataclasses

from gradci.scenarios.contract.devices import agreement_device
from gradci.worker.runner import CellSpec


def agreement_spec(spec: CellSpec) -> CellSpec:
    """``spec``'s agreement cell.

    Its stored device label and the device the runner computes on (when the worker maps the label to
    its own GPU), each with the agreement suffix.
    """
    return dataclasses.replace(spec, device=agreement_device(spec.device),
                               run_on=agreement_device(spec.run_on) if spec.run_on else None)
