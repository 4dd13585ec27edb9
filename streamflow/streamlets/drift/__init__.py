"""Drift detection beside a served model (see :mod:`.streamlet`).

Windowed two-sample tests (KS, chi-squared, PSI, with a Bonferroni or FDR
correction) against a reference, and river's ADWIN and Page-Hinkley on the
model's confidence, class mix and error rate; a ``DriftReport`` per window.
Tensor inputs are tested per element and as a whole (MMD), text inputs by
length, vocabulary and out-of-vocabulary rate. Windows are cut per model
version, and each report names the version that made its predictions.
"""

from streamflow.streamlets.drift.streamlet import DriftDetector

__all__ = ["DriftDetector"]
