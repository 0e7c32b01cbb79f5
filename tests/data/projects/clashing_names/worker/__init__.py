"""The user's own `worker` package (not gradci's Celery worker)."""
