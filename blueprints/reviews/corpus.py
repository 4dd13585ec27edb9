"""A labelled corpus of short product reviews, generated from templates and a seed.

Why generated: the example needs text a model can learn in seconds, labelled,
the same on every machine, and free to ship. Real review data sets are large,
licensed and downloaded; these sentences are built from a small vocabulary of
products, praise and complaints, so nothing is downloaded and the data set is
a pure function of its seed.

It is not trivially separable: both classes share the products, openers and
filler; some praise is negated ("never broke") and some complaints are too
("not worth the money"); a mixed review has a claim of each kind and the
verdict decides; and a few labels are flipped, as by a reviewer who clicked the
wrong star, so no model scores 100% and the accuracy an example logs means something.
"""

from __future__ import annotations

import random

__all__ = ["LABELS", "Review", "generate"]

LABELS = ("negative", "positive")

Review = tuple[str, int]  # (text, index into LABELS)

_PRODUCTS = (
    "blender", "kettle", "toaster", "headphones", "keyboard", "backpack", "lamp", "charger",
    "mouse", "speaker", "jacket", "tent", "drill", "camera", "monitor", "chair", "pan",
    "vacuum", "watch", "router",
)  # fmt: skip
_OPENERS = (
    "", "Honestly,", "Overall,", "Well,", "To be fair,", "After two weeks,", "So far,",
    "For the price,", "In short,", "Bought it as a gift, and",
)  # fmt: skip
_PRAISE = (
    "works perfectly", "is excellent", "is great value", "feels solid", "exceeded my expectations",
    "is really comfortable", "was easy to set up", "is fast and quiet", "looks beautiful",
    "is worth every penny", "does exactly what it says", "is sturdy and well made",
    "never broke", "has not failed once", "arrived early and works well",
)  # fmt: skip
_COMPLAINTS = (
    "stopped working", "is poorly made", "broke after a week", "is a waste of money",
    "feels cheap", "is really uncomfortable", "was impossible to set up", "is loud and slow",
    "looks nothing like the photos", "is not worth the money", "does not do what it says",
    "fell apart", "arrived damaged", "is flimsy and rattles", "never worked properly",
)  # fmt: skip
_VERDICTS = {
    1: ("I love it.", "Highly recommended.", "Would buy again.", "Five stars.", "Very happy."),
    0: ("I want a refund.", "Avoid it.", "Would not buy again.", "One star.", "Very disappointed."),
}
_TEMPLATES = (
    "{opener} the {product} {claim}.",
    "{opener} this {product} {claim}. {verdict}",
    "The {product} {claim}, {also}.",
    "{verdict} The {product} {claim}.",
    "My new {product} {claim}.",
)
_MIXED = "{opener} the {product} {other}, but it {claim}. {verdict}"
_MIXED_SHARE = 0.15
_FLIPPED_SHARE = 0.03


def _review(rng: random.Random, label: int) -> str:
    claims = _PRAISE if label else _COMPLAINTS
    first, second = rng.sample(claims, 2)
    mixed = rng.random() < _MIXED_SHARE
    text = (_MIXED if mixed else rng.choice(_TEMPLATES)).format(
        opener=rng.choice(_OPENERS),
        product=rng.choice(_PRODUCTS),
        claim=first,
        other=rng.choice(_COMPLAINTS if label else _PRAISE),
        also=f"and it {second}" if not second.startswith("is ") else f"and {second[3:]}",
        verdict=rng.choice(_VERDICTS[label]),
    )
    text = " ".join(text.split())  # the empty opener leaves a double space
    return text[0].upper() + text[1:]


def generate(count: int = 3000, *, seed: int = 11) -> list[Review]:
    """`count` reviews, balanced between the labels, in a seeded random order."""
    rng = random.Random(seed)
    labels = [index % len(LABELS) for index in range(count)]
    rng.shuffle(labels)
    reviews = [(_review(rng, label), label) for label in labels]
    return [
        (text, 1 - label if rng.random() < _FLIPPED_SHARE else label) for text, label in reviews
    ]
