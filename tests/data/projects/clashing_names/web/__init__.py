"""The user's own `web` package: naming helpers (not gradci's dashboard)."""
