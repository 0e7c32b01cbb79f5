"""``python -m gradci``: the command line, as the ``gradci`` script runs it."""
from gradci.cli.commands import app

app()
