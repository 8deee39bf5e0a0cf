"""The explorer: ipywidgets controls for one run's parameters and behaviour, cost curves
over N for every organisation kind, and a run stepped event by event or super-step by
super-step (or played, a super-step per tick) with its organisation, queues and series
redrawn after each step.

    from megaactors.explore import Explorer
    Explorer()            # in a notebook: controls, buttons and figures

Every control and button is reachable from Python (``explorer.controls[...]``,
``explorer.buttons[...]``), as are the figures last drawn (``explorer.figures``), the
run (``explorer.runtime``), its :class:`~megaactors.experiments.collector.DataCollector`
(``explorer.collector``) and the cost-curve rows (``explorer.rows``).
"""

from __future__ import annotations

import html
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from megaactors.core.llm import PRICES
from megaactors.errors import ParameterError
from megaactors.experiments.collector import CollectorError, DataCollector
from megaactors.experiments.plots.cost import cost_figure
from megaactors.experiments.spec import BUILT_IN_TOPOLOGIES, PARAMETERS, TOPOLOGIES, RunSpec
from megaactors.explore.views import png, series_figure, state_figure
from megaactors.runtime.sim import SimRuntime

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["BEHAVIOURS", "CURVE_AGENTS", "Explorer"]

CHAT_ROUND = "chat round"
BEHAVIOURS = (CHAT_ROUND, "MegaAgent: Gobang", "MegaAgent: national policy")
"""What the agents do: the chat round of the cost experiments (on the organisation the
controls describe), or a MegaAgent scenario of §3 (a lone boss recruits its
organisation during the run; the controls' model, latency, seed and serial apply)."""

CURVE_AGENTS = (10, 30, 100, 300, 1_000, 3_000, 10_000)
"""N values of the cost curves (those up to the chosen N, and the chosen N itself)."""
_SPEC_CONTROLS = (
    "topology",
    "agents",
    "group_size",
    "fanout",
    "rounds",
    "seed",
    "model",
    "latency_median_s",
    "latency_sigma",
    "max_concurrent_llm",
    "serial",
    "message_bytes",
    "output_tokens",
)


class Explorer:
    """Controls → a run → figures. ``spec`` sets the controls' starting values."""

    def __init__(
        self, spec: RunSpec | None = None, *, max_messages: int = 300_000, max_drawn: int = 400, dpi: int = 72
    ) -> None:
        import ipywidgets as w

        spec = spec or RunSpec(topology="two-tier", agents=60, group_size=10, seed=1)
        self.max_messages = max_messages
        self.max_drawn = max_drawn
        self.dpi = dpi
        wide = {"description_width": "150px"}
        lay = w.Layout(width="300px")

        def box(cls: Any, name: str, description: str, **kw: Any) -> Any:
            """A control for run parameter ``name``, bounded as the parameter is declared."""
            value = kw.pop("value", getattr(spec, name))
            declared = PARAMETERS[name]
            for bound in ("min", "max"):
                limit = getattr(declared, f"{bound}imum")
                if cls in (w.BoundedIntText, w.BoundedFloatText) and bound not in kw and limit is not None:
                    kw[bound] = declared.kind(limit)
            return cls(value=value, description=description, style=wide, layout=lay, **kw)

        self.controls: dict[str, Any] = {
            "behaviour": w.Dropdown(
                options=list(BEHAVIOURS), value=CHAT_ROUND, description="behaviour", style=wide, layout=lay
            ),
            "topology": box(w.Dropdown, "topology", "organisation", options=list(TOPOLOGIES)),
            "agents": box(w.BoundedIntText, "agents", "agents N"),
            "group_size": box(w.BoundedIntText, "group_size", "group size G"),
            "fanout": box(w.BoundedIntText, "fanout", "fan-out (hierarchy)"),
            "rounds": box(w.BoundedIntText, "rounds", "chat rounds"),
            "seed": box(w.BoundedIntText, "seed", "seed", max=2**53),  # what a browser's numbers hold exactly
            "model": box(w.Dropdown, "model", "model (prices)", options=sorted(PRICES)),
            "latency_median_s": box(w.BoundedFloatText, "latency_median_s", "LLM latency median, s"),
            "latency_sigma": box(w.BoundedFloatText, "latency_sigma", "latency sigma", step=0.1),
            "max_concurrent_llm": box(
                w.BoundedIntText,
                "max_concurrent_llm",
                "LLM calls cap (0: none)",
                min=0,
                value=spec.max_concurrent_llm or 0,
            ),
            "serial": box(w.Checkbox, "serial", "serial (one Processing)", indent=True),
            "message_bytes": box(w.BoundedIntText, "message_bytes", "message bytes"),
            "output_tokens": box(w.BoundedIntText, "output_tokens", "tokens per reply"),
            "step_s": w.BoundedFloatText(
                value=1.0, min=1e-6, max=1e6, description="super-step, s", style=wide, layout=lay
            ),
        }
        self.buttons: dict[str, Any] = {
            "curves": w.Button(description="Cost curves", icon="line-chart", button_style="primary"),
            "reset": w.Button(description="New run", icon="refresh"),
            "event": w.Button(description="Step event", icon="step-forward"),
            "superstep": w.Button(description="Step super-step", icon="forward"),
            "finish": w.Button(description="Run to end", icon="fast-forward"),
        }
        self.play = w.Play(value=0, min=0, max=10**9, step=1, interval=400, description="play super-steps")
        """Steps a super-step per tick while playing; stops at the end of the run."""
        self.status = w.HTML()
        self.images = {name: w.Image(format="png") for name in ("curves", "state", "series")}
        self.figures: dict[str, Figure] = {}
        self.rows: pd.DataFrame | None = None
        self.runtime: SimRuntime | None = None
        self.collector: DataCollector | None = None
        self.spec: RunSpec | None = None
        self.error: str | None = None
        self.buttons["curves"].on_click(lambda _: self.cost_curves())
        self.buttons["reset"].on_click(lambda _: self.reset())
        self.buttons["event"].on_click(lambda _: self.step(events=1))
        self.buttons["superstep"].on_click(lambda _: self.step())
        self.buttons["finish"].on_click(lambda _: self.finish())
        self.play.observe(lambda _: self._tick(), names="value")
        self._holding = False
        for control in self.controls.values():
            control.observe(lambda _: self._changed(), names="value")
        names = list(self.controls)
        half = (len(names) + 1) // 2
        self.widget = w.VBox(
            [
                w.HBox([w.VBox([self.controls[n] for n in part]) for part in (names[:half], names[half:])]),
                w.HBox([*self.buttons.values(), self.play]),
                self.status,
                self.images["state"],
                self.images["series"],
                self.images["curves"],
            ]
        )
        self.reset()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The live widget, with the current run's picture and a line of text for
        places that cannot show widgets (a stored notebook on a repository page)."""
        import base64

        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        picture = self.images["state"].value
        if picture:
            bundle["image/png"] = base64.b64encode(bytes(picture)).decode("ascii")
        rt = self.runtime
        where = f"{self.controls['behaviour'].value}, N = {rt.org.n:,}" if rt is not None else "no run"
        bundle["text/plain"] = f"Explorer ({where}; open in Jupyter for the controls)"
        return bundle

    # ------------------------------------------------------------------ the parameters

    def current_spec(self) -> RunSpec | None:
        """The run the controls describe, or None (with the reason in the status line)
        when they describe an impossible one."""
        values = {name: self.controls[name].value for name in _SPEC_CONTROLS}
        values["max_concurrent_llm"] = values["max_concurrent_llm"] or None
        try:
            spec = RunSpec(**values)
        except ParameterError as exc:
            self._fail(str(exc))
            return None
        self.error = None
        return spec

    def _fail(self, message: str) -> None:
        self.error = message
        self.status.value = f"<span style='color:#b00'>{html.escape(message)}</span>"

    def set(self, **values: Any) -> None:
        """Set several controls (by name) and start one new run, not one per control."""
        unknown = sorted(set(values) - set(self.controls))
        if unknown:
            raise KeyError(f"no control named {', '.join(unknown)}; controls: {', '.join(self.controls)}")
        self._holding = True
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._holding = False
        self.reset()

    def _changed(self) -> None:
        if not self._holding:
            self.reset()

    # ------------------------------------------------------------------ stepping a run

    def reset(self) -> None:
        """Build a fresh run from the controls, start it (the start cascade at t = 0) and
        draw it."""
        spec = self.current_spec()
        if spec is None:
            self.runtime = self.collector = None
            return
        try:
            collector = DataCollector(step_s=float(self.controls["step_s"].value), agents=False)
        except CollectorError as exc:
            self._fail(str(exc))
            return
        self.spec = spec
        self.runtime = self._build(spec)
        self.collector = collector
        collector.advance(self.runtime)
        self._draw_run()

    def _build(self, spec: RunSpec) -> SimRuntime:
        behaviour = self.controls["behaviour"].value
        if behaviour == CHAT_ROUND:
            return replace(spec, runtime="sim", trace=False).build()
        from megaactors.core.llm import LatencyModel
        from megaactors.megaagent.scenarios import GOBANG, POLICY

        scenario = {BEHAVIOURS[1]: GOBANG, BEHAVIOURS[2]: POLICY}[behaviour]
        latency = LatencyModel(spec.latency_median_s, spec.latency_sigma, scenario.latency.per_output_token_s)
        return scenario.but(model=spec.model, latency=latency, serial=spec.serial).runtime(spec.seed)

    def _tick(self) -> None:
        if not self.step():
            self.play.playing = False

    def step(self, events: int | None = None) -> bool:
        """One event (``events=1``), ``events`` events, or one super-step; then redraw.
        Returns False when the run had nothing left to do."""
        if self.runtime is None or self.collector is None:
            return False
        more = self.collector.advance(self.runtime, events=events) if not self.runtime.finished else False
        self._draw_run()
        return more

    def finish(self) -> None:
        """Run to the end, collecting every super-step, and redraw."""
        if self.runtime is None or self.collector is None:
            return
        self.collector.run(self.runtime)
        self._draw_run()

    def _draw_run(self) -> None:
        rt, collector, spec = self.runtime, self.collector, self.spec
        assert rt is not None and collector is not None and spec is not None
        states = [a.state for a in rt.agents]
        queues = [rt.queued(i) for i in range(len(rt.agents))]
        traffic = dict(rt.ledger.messages_by_channel)
        self._show(
            "state",
            state_figure(rt.org, states, queues, traffic, time_s=rt.now, events=rt.steps, max_drawn=self.max_drawn),
        )
        import pandas as pd

        self._show("series", series_figure(collector.model_frame(), pd.DataFrame([{"model": spec.model}])))
        ledger = rt.ledger
        done = "finished" if rt.finished else f"next event at t = {rt.next_event_time:.3f} s"
        behaviour = self.controls["behaviour"].value
        what = spec.topology if behaviour == CHAT_ROUND else behaviour
        self.status.value = (
            f"{what}, N = {rt.org.n:,}: t = {rt.now:.3f} s virtual, {rt.steps:,} events, "
            f"{ledger.messages:,} messages, {ledger.llm_calls:,} LLM calls, ${ledger.cost_usd:.4f} — {done}"
        )

    # ------------------------------------------------------------------ cost curves

    def cost_curves(self) -> pd.DataFrame | None:
        """Run every organisation kind with the chosen parameters at each N of
        :data:`CURVE_AGENTS` up to the chosen N (and at N), skipping runs beyond
        ``max_messages`` (drawn as closed form); draw messages and dollars versus N."""
        from matplotlib.figure import Figure

        from megaactors.experiments.sweep import run_sweep

        spec = self.current_spec()
        if spec is None:
            return None
        if self.controls["behaviour"].value != CHAT_ROUND:
            self._fail("cost curves are drawn for the chat round; choose it as the behaviour")
            return None
        agents = sorted({n for n in CURVE_AGENTS if n < spec.agents} | {spec.agents})
        flat = replace(spec, topology="flat", trace=False)
        base = {k: [getattr(flat, k)] for k in PARAMETERS}
        grid = [{**base, "topology": [t], "agents": agents} for t in BUILT_IN_TOPOLOGIES]
        self.rows = run_sweep(grid, None, workers=0, max_messages=self.max_messages, progress=False)
        fig = Figure(figsize=(12, 4.6), layout="constrained")
        for ax, metric in zip(fig.subplots(1, 2), ("messages", "dollars"), strict=True):
            cost_figure(self.rows, metric, ax=ax)
            ax.axvline(spec.agents, color="0.5", lw=1, ls=":", label=f"chosen N = {spec.agents:,}")
            ax.legend(fontsize=8, loc="upper left")
        self._show("curves", fig)
        return self.rows

    def _show(self, name: str, fig: Figure) -> None:
        self.figures[name] = fig
        self.images[name].value = png(fig, self.dpi)
