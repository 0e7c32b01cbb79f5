"""What scenario authors write: the Scenario record, its inputs, expectations, ``wrt``,
precision, the array namespace, and a repository's gradci.toml.
"""
