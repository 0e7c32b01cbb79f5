"""The ``gradci`` command line: the top layer, the only one that wires ``scenarios`` (the engine),
``services`` (the server side), ``worker`` and ``web`` together."""
