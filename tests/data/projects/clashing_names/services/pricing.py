"""A price with a volume surcharge, written against the array API of its input."""
RATE = 1.2


def price(x):
    return RATE * x + 0.05 * x ** 2


def price_derivative(x):
    return RATE + 0.1 * x
