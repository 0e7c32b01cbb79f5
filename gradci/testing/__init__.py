"""What gradci's own tests and benchmarks share to drive the real thing: processes started through
the production entry points (``gradci api``, ``gradci worker``), git repositories of scenarios,
scratch PostgreSQL databases, and big synthetic runs.

Nothing here is imported by the service itself; it imports only ``gradci`` and third-party
packages (never the repository's ``tests/``), so ``bench/`` may use it as freely as ``tests/support``.
"""
