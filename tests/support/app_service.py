"""The service in GitHub App mode over a fake GitHub, as the App end-to-end tests run it.

One worker, the App's private key in a file of its own (mode 0600, as an operator keeps it), the
repositories cloned from local mirrors (``mirrors/<owner>/<name>.git``), ``FULL_NAME`` registered.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gradci._testing.databases import emptied, flushed
from gradci._testing.service import Service, running_service
from tests.support import webhook_client
from tests.support.fake_github import FakeGitHub

FULL_NAME = "Codertocat/Hello-World"
APP_ID, INSTALLATION = 31337, 4242


@contextlib.contextmanager
def app_service(postgres_database: str, redis_database: str, mirrors: Path, fake: FakeGitHub, private_key: str,
                tmp_path_factory: Any, **settings: str) -> Iterator[Service]:
    """The service of App ``APP_ID`` (``settings`` added to, or over, the usual ones); its worker's log is
    printed on the way out."""
    key_file = tmp_path_factory.mktemp("key") / "app.pem"
    key_file.write_text(private_key)
    key_file.chmod(0o600)
    usual = dict(github_webhook_secret=webhook_client.SECRET, github_app_id=str(APP_ID),
                 github_app_private_key_file=str(key_file), github_api_url=fake.url,
                 public_url="http://gradci.example", worker_heartbeat_s="1", allowed_repos=FULL_NAME,
                 clone_url_template=f"file://{mirrors}/{{full_name}}.git")
    with running_service(emptied(postgres_database), flushed(redis_database), tmp_path_factory.mktemp("work"),
                         tmp_path_factory.mktemp("logs"), concurrency=1, **(usual | settings)) as running:
        try:
            yield running
        finally:
            print(running.log("gradci.worker.log")[-4000:])
