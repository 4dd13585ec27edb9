"""What a drift config needs before it is swapped in: its reference dataset and hosted detector.

Both are slow (a download, a health check), so they run on the detector's
worker thread while the old config keeps working, exactly as a model loads
beside the model that is serving. Anything that fails here fails the config
as a whole, with the reason on the status outlet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from streamflow.models import remote
from streamflow.streamlets import datasets
from streamflow.streamlets.drift import detect
from streamflow.streamlets.drift.settings import DriftSettings

__all__ = ["Loaded", "load"]


@dataclasses.dataclass(frozen=True)
class Loaded:
    reference: detect.Reference | None  # None: take the first records
    client: remote.InferenceClient | None  # the hosted detector, in remote mode


def load(
    settings: DriftSettings,
    *,
    allowlist: Sequence[str],
    cache_dir: Path,
    timeout: float,
    retries: int,
) -> Loaded:
    """The config's reference (prepared) and detector client (checked ready); raises on failure."""
    client = None
    if settings.detector_url:
        remote.check_ready(
            protocol=remote.V2,
            base_url=settings.detector_url,
            model=settings.detector_model,
            timeout=timeout,
        )
        client = remote.InferenceClient(
            protocol=remote.V2,
            base_url=settings.detector_url,
            model=settings.detector_model,
            # one request per window: the detector needs the whole window at once
            settings=remote.ClientSettings(
                batch_size=settings.window, timeout=timeout, retries=retries
            ),
        )
    if not settings.reference_location:
        return Loaded(None, client)
    columns = datasets.load_columns(
        location=settings.reference_location,
        sha256=settings.reference_sha256,
        allowlist=allowlist,
        cache_dir=cache_dir,
        numeric=settings.numeric,
        categorical=settings.categorical,
        fmt=settings.reference_format,
    )
    rows = len(next(iter(columns.values()))) if columns else 0
    prepared = detect.prepare(
        columns,
        numeric=settings.numeric,
        categorical=settings.categorical,
        bins=settings.psi_bins,
        origin=f"{settings.reference_location} ({rows} rows)",
    )
    return Loaded(prepared, client)
