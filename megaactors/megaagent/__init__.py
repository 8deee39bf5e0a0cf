"""Reproduction of MegaAgent (arXiv:2408.09955) §2–§3 in simulation: the paper's
numbers and the reference run measured (``paper``, ``reference_log``), the calibrated
scenarios (``scenarios``, ``calibration``), candidate mechanisms and sensitivity axes
(``mechanisms``, ``sensitivity``), the complexity sweep (``complexity``, ``stats``), and
the report with its figures (``reproduce``, ``records``, ``report_md``, ``figures``)."""
