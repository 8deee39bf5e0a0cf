"""Exploring organisations in a notebook: :class:`Explorer` (ipywidgets controls, cost
curves, a run stepped event by event with agents coloured by state)."""

from megaactors.explore.app import CURVE_AGENTS, Explorer

__all__ = ["CURVE_AGENTS", "Explorer"]
