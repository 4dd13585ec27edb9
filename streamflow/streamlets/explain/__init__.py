"""Explanations of a served model's predictions (see :mod:`.streamlet`).

Integrated gradients (``tf.GradientTape``), SHAP's Gradient and Kernel
explainers, or a remote KServe ``:explain`` endpoint, for a sample of
records or the interesting ones, within a time budget per batch.
"""

from streamflow.streamlets.explain.streamlet import METHODS, ModelExplainer

__all__ = ["METHODS", "ModelExplainer"]
