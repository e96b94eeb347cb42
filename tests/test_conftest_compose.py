"""The tests' ``conftest.compose``: a list that differs from an earlier one only in leaf values is a copy of that
compose with the values set (``_leaf_copy``), and that copy is Hydra's compose of the list, byte for byte."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from . import conftest as C

#: (first list, a later list of the same shape): values of every type, an interpolation, null, a preset
SAME_SHAPE = [
    (["model=dlm", "trainer.lr=0.1", "trainer.max_iters=60"], ["model=dlm", "trainer.lr=0.3", "trainer.max_iters=7"]),
    (["model=svgp", "seed=1", "model.num_inducing=20"], ["model=svgp", "seed=1", "model.num_inducing=5"]),
    (
        ["+experiment=classification_smoke", "trainer.eval_every=30", "dataset.name=thyroid"],
        ["+experiment=classification_smoke", "trainer.eval_every=null", "dataset.name='a b'"],
    ),
    (["dataset=pol", "trainer.lr=0.01"], ["dataset=pol", "trainer.lr=${trainer.max_iters}"]),
]


@pytest.fixture
def composed(monkeypatch):
    """Empty caches, and the lists Hydra composes from here on."""
    monkeypatch.setattr(C, "_COMPOSED", {})
    monkeypatch.setattr(C, "_READONLY", {})
    monkeypatch.setattr(C, "_SHAPES", {})
    monkeypatch.delenv("GPDLM_TEST_COMPOSE_CHECK", raising=False)
    lists: list = []
    real = C.hydra_compose
    monkeypatch.setattr(C, "hydra_compose", lambda o, hydra=False: lists.append(list(o)) or real(o, hydra=hydra))
    return lists


@pytest.mark.parametrize("first,later", SAME_SHAPE, ids=lambda o: o[0] if isinstance(o, list) else None)
def test_a_list_of_the_same_shape_is_a_copy_equal_to_hydras_compose(first, later, composed):
    a = C.compose(first)
    b = C.compose(later)
    assert composed == [first] and len(C._SHAPES) == 1
    assert OmegaConf.to_yaml(b) == OmegaConf.to_yaml(C.hydra_compose(later))
    assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(C.hydra_compose(first))
    assert OmegaConf.to_yaml(a) != OmegaConf.to_yaml(b)  # the values really changed


@pytest.mark.parametrize(
    "later",
    [
        ["model=svgp", "trainer.lr=0.3"],  # another group choice
        ["model=dlm", "+trainer.extra=1"],  # an added key
        ["model=dlm", "trainer.lr=0.3", "seed=4"],  # another key
        ["model=dlm", "trainer.lr=[1,2]"],  # a list value
    ],
)
def test_a_list_of_another_shape_is_composed(later, composed):
    C.compose(["model=dlm", "trainer.lr=0.1"])
    C.compose(later)
    assert composed == [["model=dlm", "trainer.lr=0.1"], later]


def test_a_key_the_earlier_config_lacks_is_composed_and_hydras_error_stands(composed):
    C.compose(["model=dlm", "trainer.lr=0.1"])
    with pytest.raises(Exception, match="Could not override 'trainer.nonsense'"):
        C.compose(["model=dlm", "trainer.nonsense=0.1"])


def test_with_hydras_node_every_list_is_composed(composed):
    """``hydra=True`` keeps the exact-list cache only: the hydra node records the overrides themselves."""
    a = C.compose(["trainer.lr=0.1"], hydra=True)
    b = C.compose(["trainer.lr=0.3"], hydra=True)
    assert list(a.hydra.overrides.task) == ["trainer.lr=0.1"] and list(b.hydra.overrides.task) == ["trainer.lr=0.3"]
    assert C._SHAPES == {} and len(composed) == 2
