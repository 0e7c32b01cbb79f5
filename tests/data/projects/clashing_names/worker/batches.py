def discount(x):
    """A smooth bulk discount: 1 for small quantities, falling towards 0.9."""
    return 1 - 0.1 * x ** 2 / (1 + x ** 2)
