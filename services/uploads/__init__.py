"""Results uploaded from a project's own CI (``POST /api/uploads``).

The body's schema, who may upload (per-repository tokens, GitHub Actions' OIDC id tokens), and
storing shards into one run per commit.
"""
