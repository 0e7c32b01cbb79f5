"""Detection power: errors planted in a project's derivative rules while its cells are checked again.

``planting`` swaps a rule's derivative method for one that perturbs its output; ``measure`` re-runs the
cells that reached the rule under each plant. The records they make are ``gradci.scenarios.rules.power``'s.
"""
