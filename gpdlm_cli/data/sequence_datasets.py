"""What the recurrent family needs to know about a sequence dataset, by its registry name: whether it
is one (:func:`check_sequence_dataset`) and Table 1's statistics of the series a run of it uses
(:func:`series_statistics`; GP-LSTM paper Table 1)."""

from __future__ import annotations

from ..exceptions import UnsupportedCombination
from .registry import all_datasets, get_dataset_info
from .sequences import real_sysid_statistics, sysid_statistics

#: the sequence datasets whose runs report Table 1's statistics of their own series (by loader key): the
#: real sets (their first ``n`` steps) and the generators (the series of the run's generator seed)
TABLE1_SERIES = {
    "actuator": ("real", "actuator"),
    "drives": ("real", "drives"),
    "sysid_actuator": ("generated", "actuator"),
    "sysid_drives": ("generated", "drives"),
}


def series_statistics(name: str, n: int | None = None, seed: int = 0) -> dict[str, float]:
    """Table 1's statistics ``data_abs_corr`` and ``data_snr`` of the series a run of dataset ``name``
    with options ``n`` and ``seed`` trains and tests on: on the real ``actuator`` / ``drives`` their
    first ``n`` steps (``sequences.real_sysid_statistics``); on the generators the series of generator
    seed ``seed`` (``sequences.sysid_statistics``); other datasets: none (an empty dict)."""
    info = get_dataset_info(name)
    kind = TABLE1_SERIES.get(info.loader_key)
    if kind is None:
        return {}
    stats = real_sysid_statistics(info, n) if kind[0] == "real" else sysid_statistics(kind[1], n, seed)
    return {"data_abs_corr": stats["abs_corr"], "data_snr": stats["snr"]}


def check_sequence_dataset(name: str, who: str) -> None:
    """Refuse (one-line ``UnsupportedCombination``) a dataset ``name`` that is not a sequence dataset
    for ``who`` (e.g. ``model=gp_lstm``), naming the sequence datasets."""
    info = get_dataset_info(name)
    if info.task != "sequence":
        seq = [n for n, i in all_datasets().items() if i.task == "sequence"]
        raise UnsupportedCombination(
            f"{who} maps windows of a time series: it needs a sequence dataset ({', '.join(seq)}); "
            f"dataset={name} is a {info.task} dataset"
        )


__all__ = ["TABLE1_SERIES", "check_sequence_dataset", "series_statistics"]
