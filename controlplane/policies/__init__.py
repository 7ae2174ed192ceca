"""Versioned local policies: the agents' ONNX models as objects of the hub.

* :mod:`.upload`: the ``POST /v1/policies`` body (the model as base64, its ``metadata.json``).
* :mod:`.check`: what a model must pass before it is kept (it loads in this runtime, its
  metadata matches the features and actions, and it agrees enough with the version in force on
  held-out decisions).
* :mod:`.registry`: the versions in the store.
"""
