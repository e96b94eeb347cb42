"""``GPDLM_CONFIG_PATH``: a project's own config folders on Hydra's search path, for every gpdlm command.

``GPDLM_CONFIG_PATH=myconf:/shared/gp-presets gpdlm train +experiment=mine`` finds
``myconf/experiment/mine.yaml`` as ``gpdlm train -cd myconf ...`` or ``hydra.searchpath=[file://myconf]``
would, also where gpdlm composes configs itself (the pre-launch check, ``--dry-run``, batched sweeps).
The folders (``os.pathsep``-separated; relative ones against the working directory) come after gpdlm's
packaged configs, whose names win: a folder adds presets and group options, it does not replace them.
Hydra discovers search-path plugins in the ``hydra_plugins`` namespace package only, hence this module;
without the variable it adds nothing.
"""

from __future__ import annotations

import os

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

ENV = "GPDLM_CONFIG_PATH"
PROVIDER = "gpdlm (GPDLM_CONFIG_PATH)"


def config_folders(value: str | None = None) -> list[str]:
    """The absolute folders ``GPDLM_CONFIG_PATH`` (or ``value``) names, in order; empty entries skipped."""
    text = os.environ.get(ENV, "") if value is None else value
    return [os.path.abspath(p) for p in text.split(os.pathsep) if p.strip()]


class GpdlmSearchPathPlugin(SearchPathPlugin):
    """Appends each ``GPDLM_CONFIG_PATH`` folder (``file://<absolute folder>``) to Hydra's search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for folder in config_folders():
            search_path.append(provider=PROVIDER, path=f"file://{folder}")
