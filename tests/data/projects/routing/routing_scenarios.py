import numpy as np

from gradci import Scenario


def square(x):
    return (x ** 2).sum()

def scenarios():
    x = np.linspace(0.5, 1.5, 4)
    def make(name, **kwargs):
        return Scenario(name=name, operator="gradient", f=square, x=x, **kwargs)
    return [make("plain/gradient", dtypes=("float64",)),  # fd checks float64 only
            make("bf16/gradient", dtypes=("float32", "bfloat16")),
            make("needs90/gradient", dtypes=("float32",), requirements={"min_capability": "90"}),
            make("needs60gb/gradient", dtypes=("float32",), requirements={"min_memory": "60GB"}),
            make("needs100gb/gradient", dtypes=("float32",), requirements={"min_memory": "100GB"})]
