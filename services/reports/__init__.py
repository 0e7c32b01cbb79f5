"""Reports on runs: gradient coverage, the diff against the base run and patch coverage.

They make one typed record (``model.RunReport``) that the PR comment, the commit statuses, the
dashboard and the API read.
"""
