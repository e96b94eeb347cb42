"""Composing a config: Hydra's own (every YAML file of the defaults tree parsed at each compose, and the
process's whole ConfigStore deep-copied with the config sources) against gpdlm's
(``sweep.compose.cache_config_files``: each file parsed once per process, a copy handed out; the store shared
by the compose's copy of the sources), and the parse cache alone, in one run, interleaved round by round so
that all see the same machine. Reports the median compose time of each and their ratios to Hydra's (target
<= 0.85), over presets of every family with Hydra's own config (``return_hydra_config``, what a multirun's job
composes).

    python benchmarks/bench_compose.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

PRESETS = [
    "regression_logloss_pol",
    "classification_thyroid",
    "gplstm_sysid",
    "rkhs_gaussian_study",
    "svbssgp_aimpeak",
    "pic_airline_reduced",
    "airline_curves_reduced",
    "bias_study",
]


def _readers():
    from hydra.core.plugins import Plugins

    Plugins.instance()
    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource

    return ImportlibResourcesConfigSource, FileConfigSource


def _compose_all() -> list[float]:
    from hydra import compose, initialize_config_module

    times = []
    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        for p in PRESETS:
            t0 = time.perf_counter()
            compose(config_name="config", overrides=[f"+experiment={p}"], return_hydra_config=True)
            times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from hydra._internal.config_repository import CachingConfigRepository as repo

    from gpdlm_cli.sweep import compose as C

    package, folder = _readers()
    hydras = (package._read_config, folder.load_config, repo.__init__)
    C.cache_config_files()
    gpdlms = (package._read_config, folder.load_config, repo.__init__)
    parse_only = (*gpdlms[:2], hydras[2])
    _compose_all()  # warm-up: imports, plugin scan, the cache filled once (a sweep fills it on its first compose)
    arms: dict[str, list[float]] = {"Hydra's": [], "parsed once": [], "parsed once, store shared (gpdlm)": []}
    for _ in range(args.rounds):
        for setting, out in zip((hydras, parse_only, gpdlms), arms.values()):
            package._read_config, folder.load_config, repo.__init__ = setting
            out.extend(_compose_all())
    package._read_config, folder.load_config, repo.__init__ = gpdlms
    base = statistics.median(arms["Hydra's"])
    for name, times in arms.items():
        m = statistics.median(times)
        print(f"compose, {name + ':':36s} {m * 1000:4.0f} ms (median of {len(times)}), ratio {m / base:.2f}")
    print("target: gpdlm's ratio <= 0.85")


if __name__ == "__main__":
    main()
