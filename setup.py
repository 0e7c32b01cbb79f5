"""Packaging: the repository keeps its top-level folders (the engine in ``scenarios/``, the server
side in ``services/``, ...), but the distribution installs one import name, ``gradci``, so that it
never shadows or is shadowed by a user's own ``scenarios``, ``services``, ``web`` or ``worker``.

The metadata lives in ``pyproject.toml``; only the folder-to-package mapping, which has to list
every sub-package, is computed here.
"""
from setuptools import find_packages, setup

# Import name -> the repository folder that holds it.
LAYERS = {
    "gradci": "gradci",
    "gradci.scenarios": "scenarios",
    "gradci.services": "services",
    "gradci.worker": "worker",
    "gradci.web": "web",
}


def packages() -> list[str]:
    found = []
    for name, folder in LAYERS.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(where=folder)
                  if f"{name}.{sub}" not in LAYERS]
    return found


if __name__ == "__main__":  # setuptools' build backend runs this file as __main__; tests read LAYERS
    setup(packages=packages(), package_dir=LAYERS)
