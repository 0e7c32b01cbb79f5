"""Rules, helpers and loaders at several depths from the scenarios that reach them."""
