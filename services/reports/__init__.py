"""Reports on runs: gradient coverage, and (later) the diff against the base run and patch coverage."""
