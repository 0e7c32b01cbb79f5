"""Affected cells: what each cell depended on, and which of a base run's cells a new commit can carry.

``recording`` notes, in the runner, what each cell read of its project (the lines it ran come from the
rule tracer; the modules loaded, data files and folder listings from here); ``source_digest`` digests a
file over the functions a cell entered; ``environment`` is what every cell depends on beside the code
(software, configuration, device); ``carry`` decides, at a new commit, which cells keep their results.
"""
