"""A short run of ``bench/load.py``'s webhook load: signed pull requests at a steady rate to a real
server on PostgreSQL and Redis, each acknowledged, stored, acted on by a worker and planned exactly
once. (The latency target is the benchmark's to measure on a quiet machine, not a test's.)"""
from __future__ import annotations

import pytest

from bench.load import webhook_load

pytestmark = pytest.mark.integration


def test_a_short_webhook_load_loses_and_duplicates_nothing(clean_environment, postgres_url, redis_url):
    figures = webhook_load(postgres_url, redis_url, rate=20, seconds=2, workers=2)
    assert figures.answers == {202: 40}
    assert (figures.lost, figures.duplicated) == (0, 0)
    assert len(figures.lines()) == 5
