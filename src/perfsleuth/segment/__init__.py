"""Fleet segmentation: which machines, versions and configurations explain a fleet change.

``mixrate`` splits a change into mix (shares shifted) and rate (the same cells got slower) at leaf
level; ``lattice`` searches the dimension lattice for the few elements that explain the rate change;
``evidence`` gives each culprit its support, intervals and the confounding checks; ``localize`` ties
them together over a leaf table. Every query over fleet data is an Ibis expression run by the
engine chosen in ``perfsleuth.engine``; only small results come back to Python.
"""

from perfsleuth.segment.lattice import Culprit, LatticeResult, search
from perfsleuth.segment.localize import Localization, localize
from perfsleuth.segment.mixrate import LeafSpec, MixRate, decompose, leaf_table, leaf_terms

__all__ = ["Culprit", "LatticeResult", "LeafSpec", "Localization", "MixRate", "decompose", "leaf_table", "leaf_terms", "localize", "search"]
