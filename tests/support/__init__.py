"""The test layer's infrastructure; fixtures live in the conftest.py files, helpers here.

- ``service``: a service as real processes through the production entry points (``gradci api``,
  ``gradci worker``): ``running_service``, ``Service``, ``start_worker``; results and jobs of a run.
- ``processes``: ``spawn``/``stop``, ``wait_for``, ``free_port``, ``service_env``, process trees.
- ``repos``: git repositories of scenarios: ``project_repository`` copies a project of
  ``tests/data/projects/`` into a new repository; ``make_repository`` writes one from strings.
- ``databases``: the test session's PostgreSQL and Redis (URLs, emptying, the Redis claim).
- ``faults``: private PostgreSQL and Redis servers a test may stop, and a service on them.
- ``cells``, ``planted``, ``report_cases``, ``payloads``, ``webhook_client``, ``fake_github``: data.

What ``bench/`` shares with the tests lives in ``gradci.testing``; the modules here re-export it.
"""
