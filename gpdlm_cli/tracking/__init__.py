"""Tracking: MLflow runs (SQLite store by default) and an in-memory null tracker."""

from .tracker import MlflowTracker, NullTracker, default_tracking_uri, ensure_experiment, flatten, resolve_tracking_uri

__all__ = [
    "MlflowTracker",
    "NullTracker",
    "default_tracking_uri",
    "ensure_experiment",
    "flatten",
    "resolve_tracking_uri",
]
