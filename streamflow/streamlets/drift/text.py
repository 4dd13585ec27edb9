"""Drift in text: how long it is, which words it uses, and how many words are new.

A model that reads raw text sees tokens, so the statistics are about tokens.
Text is split into lower-cased word tokens (``\\w+``); an input that is
already a sequence of tokens (``shape: [-1]``) is taken as it is.

* Length: the two-sample KS test on tokens per record (:func:`stats.ks_test`).
* Vocabulary share: the chi-squared test of homogeneity on the counts of the
  reference's ``top`` most frequent tokens, plus one bucket for every other
  token, in the reference and in the window. Tokens of one record are
  counted as if independent; text whose words cluster by record (one topic
  per review) makes the test somewhat liberal, which ``alpha`` absorbs.
* Out-of-vocabulary rate: the share of the window's tokens never seen in the
  reference. It has no p-value: like PSI, it is a magnitude read against a
  threshold, and it is what a model with a fixed vocabulary (a
  ``TextVectorization`` layer) feels first.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Sequence

import numpy as np

from streamflow.streamlets.drift import stats

__all__ = ["OTHER", "TextReference", "oov_rate", "tokens", "vocabulary_test"]

OTHER = "\x00other"  # the bucket of every token outside the top ones
_WORD = re.compile(r"\w+")


def tokens(value: object, *, pad: object = "") -> tuple[str, ...]:
    """A record's tokens: words of a text, or the items of a token sequence without padding."""
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        return tuple(_WORD.findall(value.lower()))
    if isinstance(value, np.ndarray | list | tuple):
        items = value.tolist() if isinstance(value, np.ndarray) else list(value)
        flat = [x for x in _flatten(items) if x != pad and x is not None]
        return tuple(x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in flat)
    return ()


class TextReference:
    """A text feature's reference: token counts per record, and its vocabulary."""

    def __init__(self, records: Sequence[Sequence[str]], *, top: int = 50) -> None:
        if not records:
            raise ValueError("the reference has no records")
        self.lengths = stats.NumericReference(np.array([len(r) for r in records], dtype=float))
        self.counts = collections.Counter(t for r in records for t in r)
        self.top = frozenset(t for t, _ in self.counts.most_common(top))
        self.shares = stats.CategoricalReference(_bucketed(self.counts, self.top))


def vocabulary_test(reference: TextReference, records: Sequence[Sequence[str]]) -> stats.TestResult:
    """Chi-squared on the top tokens' shares (and the rest's) in the reference and the window."""
    window = [t if t in reference.top else OTHER for r in records for t in r]
    return stats.chi2_test(reference.shares, window)


def lengths(records: Sequence[Sequence[str]]) -> np.ndarray:
    return np.array([len(r) for r in records], dtype=float)


def oov_rate(reference: TextReference, records: Sequence[Sequence[str]]) -> float:
    """The share of the window's tokens that the reference never had (0 for no tokens)."""
    total = new = 0
    for record in records:
        total += len(record)
        new += sum(1 for t in record if t not in reference.counts)
    return new / total if total else 0.0


def _bucketed(counts: collections.Counter[str], top: frozenset[str]) -> list[str]:
    """The tokens as labels (the top ones by name, the rest as OTHER), one per occurrence."""
    out: list[str] = []
    for token, count in counts.items():
        out += [token if token in top else OTHER] * count
    return out


def _flatten(items: Iterable[object]) -> Iterable[object]:
    for item in items:
        if isinstance(item, list | tuple):
            yield from _flatten(item)
        else:
            yield item
