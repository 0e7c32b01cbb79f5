"""The tests' own helpers: fakes of what is outside this machine, and test data. Fixtures live in the
conftest.py files; what the tests share with ``bench/`` and the checked projects (starting a service,
processes, databases, git repositories, planted rules) lives in ``gradci._testing``.

- ``fake_github``, ``fake_github_oauth``, ``fake_oidc``, ``json_server``, ``git_http``: GitHub, its
  OAuth pages and an OIDC issuer, on loopback, checking signatures and tokens as the real ones do.
- ``faults``: private PostgreSQL and Redis servers a test may stop, and a service on them;
  ``netns``: hosts in network namespaces; ``broker``: what the broker holds.
- ``projects``: the projects of ``tests/data/projects/`` as new git repositories.
- ``cells``, ``report_cases``, ``payloads``, ``webhook_client``, ``checkouts``, ``sign_in``,
  ``uploads``: data and requests the tests send.
"""
