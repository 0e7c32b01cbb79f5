"""Rule coverage: which of a project's derivative rules, and which lines of its files, each cell ran.

``discovery`` finds the hand-written derivative rules a project defines (``torch.autograd.Function``
methods, ``jax.custom_vjp`` and ``jax.custom_jvp`` rules, ``torch.library`` custom ops' autograd
registrations, and with ``solver_calls`` the solves its calls hand to ``jax.lax.custom_linear_solve``
and ``custom_root``); ``tracing`` records with coverage.py the lines of the project's own files each
cell ran, and with ``solver_uses`` which of those solves jax used for a derivative; ``records`` is the
per-cell record that travels with a cell's result; ``summary`` says, over a check, which rules no cell
reached; ``reports`` writes the lines the cells reached as LCOV or Cobertura XML with coverage.py's own
reporters. None of it changes a cell's verdict.
"""
