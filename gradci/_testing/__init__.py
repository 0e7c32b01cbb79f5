"""What gradci's own tests and benchmarks share to drive the real thing.

Private: no user imports it. It holds processes started through the production entry points
(``gradci api``, ``gradci worker``), the databases of a test session, git repositories, planted
derivative rules, and big synthetic runs.

It ships in the package because the scenario projects the tests check import its planted rules
inside the runner's box, which sees the installed gradci and never the repository's ``tests/``. It
imports only ``gradci`` and third-party packages. The tests' own fakes (GitHub, an OIDC issuer,
network namespaces, faults) live beside the tests, in ``tests/support/``.
"""
