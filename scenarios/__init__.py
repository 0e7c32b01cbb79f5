"""gradci's checking engine: scenarios × backends × devices × dtypes against finite-difference references.

A library in its own right: no web, database or queue code lives here. Importing the package
loads nothing: ``gradci.scenarios.contract.cell`` (the cell contract the server side and REST clients
share) loads no numpy, scipy or framework, and frameworks (torch, jax) are imported only when a
backend that needs them runs. The public API is re-exported by ``gradci`` itself.
"""

if __name__ != "gradci.scenarios":  # the folder imported by its own name, the repository's root on sys.path
    raise ImportError(f"{__name__} is gradci.scenarios: import gradci.scenarios (under a second name its modules "
                      "would load twice, each copy with state of its own)")
