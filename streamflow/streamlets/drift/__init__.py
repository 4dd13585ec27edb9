"""Drift detection beside a served model (see :mod:`.streamlet`).

Windowed two-sample tests (KS, chi-squared, PSI, with a Bonferroni or FDR
correction) against a reference, and river's ADWIN and Page-Hinkley on the
model's confidence, class mix and error rate; a ``DriftReport`` per window.
"""

from streamflow.streamlets.drift.streamlet import DriftDetector

__all__ = ["DriftDetector"]
