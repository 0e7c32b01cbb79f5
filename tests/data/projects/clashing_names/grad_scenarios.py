"""The user's scenarios: they check the derivatives of the user's own pricing code, and import the
user's packages `scenarios`, `services`, `web` and `worker` beside gradci."""
import scenarios.points as points  # the package `scenarios`; the name is gradci's hook below
import services.pricing
import web.labels
import worker.batches
from gradci import Scenario, namespace


def total_price(x):
    return namespace(x).sum(services.pricing.price(x))


def discounted_total(x):
    return namespace(x).sum(services.pricing.price(x) * worker.batches.discount(x))


def scenarios():
    return [Scenario(web.labels.label("pricing", "total"), "gradient", total_price, points.prices()),
            Scenario(web.labels.label("pricing", "discounted"), "gradient", discounted_total, points.prices())]
