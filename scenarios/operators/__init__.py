"""The derivative operators.

One record each (``records``), the vocabularies the records are written against (``vocabulary``),
and the block convention of matrix results (``blocks``).
"""
