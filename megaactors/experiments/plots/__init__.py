"""Figures of coordination cost, from sweep rows and from small runs.

Every function returns a :class:`matplotlib.figure.Figure` (made without pyplot, so
nothing global is touched; Jupyter displays it) and :func:`save_figure` writes it as
PNG and SVG. From sweep rows (:func:`megaactors.experiments.sweep.load_results`):

* :func:`cost_figure` — messages, bytes, tokens or dollars versus N on log–log axes,
  one line per organisation with its fitted scaling exponent, the spread over seeds
  as a band, the closed form drawn (dashed) where runs were skipped as infeasible,
  series that coincide told apart by marker, line style and legend; dollar figures
  name the model and its prices;
* :func:`makespan_figure` — virtual makespan versus N, parallel and serial;
* :func:`group_size_figure` — two-tier cost versus group size at a fixed N, measured
  optimum beside the closed-form one;
* :func:`plot_results` — all of the above that the rows allow, saved into a directory
  (:func:`figure_jobs` lists them; :func:`save_figures` draws jobs in parallel).

From small runs: :func:`load_figure` (per-agent load), :func:`timeline_figure` (states
over virtual time), :func:`queue_figure` with :func:`sample_queues` (queue depth over
time) and :func:`organisation_figure` (the organisation drawn with networkx: only the
channels that carried messages when given a run's traffic, agents coloured by state
when given their states).
"""

from megaactors.experiments.plots.common import (
    METRICS,
    FigureJob,
    fit_exponent,
    price_title,
    save_figure,
    save_figures,
    series_labels,
)
from megaactors.experiments.plots.cost import (
    cost_figure,
    cost_overview_figure,
    figure_jobs,
    group_size_figure,
    makespan_figure,
    plot_results,
)
from megaactors.experiments.plots.organisation import organisation_figure
from megaactors.experiments.plots.runs import load_figure, queue_figure, sample_queues, timeline_figure

__all__ = [
    "METRICS",
    "FigureJob",
    "cost_figure",
    "cost_overview_figure",
    "figure_jobs",
    "fit_exponent",
    "group_size_figure",
    "load_figure",
    "makespan_figure",
    "organisation_figure",
    "plot_results",
    "price_title",
    "queue_figure",
    "sample_queues",
    "save_figure",
    "save_figures",
    "series_labels",
    "timeline_figure",
]
