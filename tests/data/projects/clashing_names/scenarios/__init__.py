"""The user's own `scenarios` package: input points (not gradci's engine)."""
