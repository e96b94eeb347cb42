"""tests/math: numeric correctness tests of gpdlm against independent dense numpy/scipy references.

This directory deliberately has no ``__init__.py`` (a package named ``math`` would shadow the
standard library). The shared references live in ``gpdlm_math_ref.py``; put this directory on
sys.path so test modules can import it under any pytest import mode.
"""

import pathlib
import sys

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
