"""gradci's checking engine: scenarios × backends × devices × dtypes against finite-difference references.

A library in its own right: no web, database or queue code lives here. Importing the package
loads nothing: ``gradci.scenarios.contract.cell`` (the cell contract the server side and REST clients
share) loads no numpy, scipy or framework, and frameworks (torch, jax) are imported only when a
backend that needs them runs. The public API is re-exported by ``gradci`` itself.
"""
