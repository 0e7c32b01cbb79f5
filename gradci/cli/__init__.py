"""The ``gradci`` command line (``gradci.cli.commands``).

It is the top layer, the only one that wires the engine (``gradci.scenarios``), the server side
(``gradci.services``), the worker and the dashboard together.
"""
from gradci.cli.commands import app as app
