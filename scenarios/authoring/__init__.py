"""What scenario authors write.

The Scenario record, expectations, ``wrt``, the array namespace, a repository's gradci.toml, and how the
user's own code and its frames are told from gradci's.
"""
