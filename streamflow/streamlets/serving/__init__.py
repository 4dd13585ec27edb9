"""Model serving with the dynamically controlled stream (see :mod:`.streamlet`)."""

from streamflow.streamlets.serving.publisher import ModelPublisher
from streamflow.streamlets.serving.streamlet import ModelServing, NoModelError

__all__ = ["ModelPublisher", "ModelServing", "NoModelError"]
