"""Reproduction of MegaAgent (arXiv:2408.09955) §2–§3 in simulation: the paper's
numbers, the two calibrated scenarios with their ablations, the complexity sweep."""
