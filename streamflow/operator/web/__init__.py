"""The live web view (``streamflow ui``, and the operator's ``--ui-port``).

A page that draws an application's graph and keeps it live, from what
already exists: the target's status, each replica's ``/metrics``, and the
drift, explanation and dead-letter topics. It lives in the operator layer so
the in-cluster operator serves the very same thing, read-only, with the
kubernetes target. :mod:`.snapshot` is the pure heart (everything the page
shows, from plain inputs); :mod:`.live` polls; :mod:`.server` serves and :mod:`.listen` runs it.
"""

from streamflow.operator.web.listen import (
    Access,
    Running,
    UiError,
    check_exposure,
    serve,
    serve_in_background,
)
from streamflow.operator.web.server import STATIC_DIR, create_app, static_ready

__all__ = [
    "STATIC_DIR",
    "Access",
    "Running",
    "UiError",
    "check_exposure",
    "create_app",
    "serve",
    "serve_in_background",
    "static_ready",
]
