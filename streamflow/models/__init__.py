"""The model library: what a model is, where it comes from, and how it is run or called.

Serving, drift and explanation streamlets, the CLI's ``model`` commands and the
image builder all use models; none of this is a streamlet itself. Here are:

- the kinds and states of the built-in model schemas (:mod:`.kinds`) and a typed
  descriptor (:mod:`.descriptor`);
- artifacts: fetched, verified, unpacked within bounds, cached (:mod:`.artifacts`,
  :mod:`.archives`, :mod:`.downloads`, :mod:`.limits`, :mod:`.locations`), and
  which descriptors are refused on sight (:mod:`.admission`);
- predictors: embedded models (Keras, SavedModel, ONNX) and model-server clients
  (:mod:`.embedded`, :mod:`.onnx_model`, :mod:`.remote`, :mod:`.wire`), behind
  one :class:`~.predictor.Predictor` protocol;
- the tensor mapping between records and a model's signature (:mod:`.tensors`);
- the live swap: load the next version off the hot path, swap it in between
  batches, retire the old one (:mod:`.swap`), and the status record each step is
  reported in (:mod:`.status`).

The streamlets built on it are in :mod:`streamflow.streamlets.serving`.
"""
