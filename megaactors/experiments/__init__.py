"""Runs described as parameters (:class:`~megaactors.experiments.spec.RunSpec`), sweeps
over parameter grids, figures of their results, and the async-vs-threads comparison."""
