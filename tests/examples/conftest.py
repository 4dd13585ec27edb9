"""Fixtures of the example tests: the digits and reviews models, trained once per session."""

from __future__ import annotations

from tests.examples.example_models import digits_models, reviews_model

__all__ = ["digits_models", "reviews_model"]
