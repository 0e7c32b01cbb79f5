"""The user's own `services` package: their pricing code (not gradci's server side)."""
