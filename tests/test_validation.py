"""Parameters declared once: parsing, checking, ranges, and every entry point
(RunSpec, run options, sweep lists, --param/--grid/--set) reading the same declarations."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megaactors import RunSpec
from megaactors.cli import build_parser
from megaactors.cli.common import CommandError, parse_assignment, parse_list
from megaactors.experiments.spec import PARAMETERS
from megaactors.validation import Param, ParameterError, declared, param

AGENTS = Param("agents", int, "number of agents", minimum=1, maximum=10**9)
LATENCY = Param("latency_s", float, "latency", unit="s", minimum=0, maximum=86_400)
POSITIVE = Param("poll", float, "pause", minimum=0, above_minimum=True, maximum=10)
CAP = Param("cap", int, "cap", minimum=1, optional=True)
SIZE = Param("size", int, "size", minimum=1, words=("optimal",))
COLOUR = Param("colour", str, "colour", choices=lambda: ("red", "blue"), noun="colour")


@pytest.mark.parametrize(
    ("p", "text", "value"),
    [
        (AGENTS, "10", 10),
        (AGENTS, " 1_000 ", 1000),
        (AGENTS, "1e6", 1_000_000),
        (AGENTS, "2.0", 2),
        (LATENCY, "0.25", 0.25),
        (LATENCY, "3", 3.0),
        (POSITIVE, "1e-3", 0.001),
        (CAP, "none", None),
        (CAP, "7", 7),
        (SIZE, "optimal", "optimal"),
        (COLOUR, "red", "red"),
        (Param("serial", bool), "yes", True),
        (Param("serial", bool), "OFF", False),
    ],
)
def test_parse_gives_typed_checked_values(p: Param, text: str, value: object) -> None:
    parsed = p.parse(text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    ("p", "text", "message"),
    [
        (AGENTS, "0", "agents must be an integer >= 1 and <= 1e9, got 0"),
        (AGENTS, "1e30", "agents must be an integer >= 1 and <= 1e9, got 1e30"),
        (AGENTS, "100000000000", "agents must be an integer >= 1 and <= 1e9, got 1e11"),
        (AGENTS, "2.5", "agents: '2.5' is not an integer"),
        (AGENTS, "inf", "agents: 'inf' is not an integer"),
        (AGENTS, "many", "agents: 'many' is not an integer"),
        (LATENCY, "inf", "latency_s must be a finite number >= 0 and <= 86400, got inf"),
        (LATENCY, "nan", "latency_s must be a finite number >= 0 and <= 86400, got nan"),
        (LATENCY, "-1", "latency_s must be a finite number >= 0 and <= 86400, got -1"),
        (POSITIVE, "0", "poll must be a finite number > 0 and <= 10, got 0"),
        (CAP, "0", "cap must be an integer >= 1 or none, got 0"),
        (SIZE, "big", "size: 'big' is not an integer or 'optimal'"),
        (COLOUR, "green", "unknown colour 'green'; expected one of red, blue"),
        (Param("serial", bool), "maybe", "serial: 'maybe' is not true or false"),
    ],
)
def test_bad_text_is_a_parameter_error_naming_the_parameter(p: Param, text: str, message: str) -> None:
    with pytest.raises(ParameterError) as info:
        p.parse(text)
    assert str(info.value) == message


def test_check_refuses_wrong_types_and_non_finite_numbers() -> None:
    for bad in (True, "3", 2.0, None, float("nan")):
        with pytest.raises(ParameterError, match="agents must be"):
            AGENTS.check(bad)
    for bad in (math.inf, -math.inf, math.nan, "1", None):
        with pytest.raises(ParameterError, match="latency_s must be"):
            LATENCY.check(bad)
    assert LATENCY.check(2) == 2.0 and isinstance(LATENCY.check(2), float)
    with pytest.raises(ParameterError, match="serial must be true or false"):
        Param("serial", bool).check(1)


@given(st.text(max_size=30))
def test_any_text_parses_to_a_valid_value_or_a_parameter_error(text: str) -> None:
    for p in (AGENTS, LATENCY, POSITIVE, CAP, SIZE, COLOUR):
        try:
            value = p.parse(text)
        except ParameterError:
            continue
        assert p.check(value) == value


def test_choices_are_read_when_checked_so_registries_may_grow() -> None:
    known = ["a"]
    p = Param("thing", str, choices=lambda: known)
    with pytest.raises(ParameterError, match="unknown thing 'b'"):
        p.check("b")
    known.append("b")
    assert p.check("b") == "b"


def test_declared_reads_names_and_types_from_the_dataclass() -> None:
    @dataclass(frozen=True)
    class Spec:
        count: int = param(3, "a count", minimum=1)
        cap: int | None = param(None, "a cap", minimum=1)
        rate: float = param(0.5, "a rate", unit="Hz", minimum=0, maximum=1)
        plain: str = "not declared"

    params = declared(Spec)
    assert list(params) == ["count", "cap", "rate"]
    assert params["count"].kind is int and not params["count"].optional
    assert params["cap"].kind is int and params["cap"].optional
    assert params["rate"].describe() == "a rate [Hz]; a finite number >= 0 and <= 1"
    assert params["rate"].flag == "--rate"


# ---------------------------------------------------------------------- RunSpec and the entry points


def test_every_run_spec_field_is_declared() -> None:
    from dataclasses import fields

    # but the behaviour's own parameters and its version, which are data of the behaviour
    assert [f.name for f in fields(RunSpec)] == [*PARAMETERS, "behaviour_params", "behaviour_version"]


def test_run_spec_checks_every_field_and_normalises_numbers() -> None:
    spec = RunSpec(latency_median_s=3)
    assert spec.latency_median_s == 3.0 and isinstance(spec.latency_median_s, float)
    for name, bad in [("agents", 10**12), ("rounds", 10**7), ("message_bytes", 10**9), ("output_tokens", 10**30),
                      ("latency_median_s", math.inf), ("latency_sigma", math.nan), ("seed", -1), ("seed", 2**64),
                      ("topology", "ring"), ("serial", "yes"), ("max_concurrent_llm", 0)]:  # fmt: skip
        with pytest.raises(ParameterError, match=name if name != "topology" else "unknown topology"):
            RunSpec(**{name: bad})


def test_from_dict_resolves_the_optimal_group_size_and_loads_old_specs() -> None:
    assert RunSpec.from_dict({"agents": 1000, "group_size": "optimal"}).group_size == 13
    assert RunSpec.from_dict({"topology": "star", "agents": 1000, "group_size": "optimal"}).group_size == 10
    with pytest.raises(ParameterError, match=r"resolved by RunSpec\.from_dict"):
        RunSpec(group_size="optimal")  # type: ignore[arg-type]
    stored = {"topology": "star", "agents": 30, "rounds": 2, "seed": 1}  # written before later parameters existed
    assert RunSpec.from_dict(stored) == RunSpec(topology="star", agents=30, rounds=2, seed=1)
    with pytest.raises(ParameterError, match="unknown parameter"):
        RunSpec.from_dict({"colour": "red"})


@pytest.mark.parametrize("command", ["run", "submit", "sweep"])
def test_every_run_parameter_is_an_option_of_the_same_name(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    defaults = RunSpec()
    head = {"run": ["run"], "submit": ["submit", "--db", "x.db"], "sweep": ["sweep", "--out", "o"]}[command]
    for name, p in PARAMETERS.items():
        assert p.flag == "--" + name.replace("_", "-")
        value = getattr(defaults, name)
        text = "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        for flag in (p.flag, *p.old_flags):
            if p.kind is bool and command != "sweep" and not p.old_flags:
                args = build_parser().parse_args([*head, flag if value else f"--no-{flag[2:]}"])
            else:
                args = build_parser().parse_args([*head, flag, text])
            parsed = getattr(args, name)
            assert (parse_list(p, parsed) == [value]) if command == "sweep" else parsed == value, (command, flag)
    capsys.readouterr()  # deprecation lines of the old spellings


def test_every_run_parameter_is_accepted_by_name_in_assignments() -> None:
    defaults = RunSpec()
    for name, p in PARAMETERS.items():
        value = getattr(defaults, name)
        text = "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        for spelling in (name, name.replace("_", "-")):
            assert parse_assignment(f"{spelling}={text}", "--grid") == (p.name, [value])
    with pytest.raises(CommandError, match="unknown parameter 'colour'; known: topology, agents"):
        parse_assignment("colour=red", "--set")
    with pytest.raises(CommandError, match="--set expects NAME=V1,V2"):
        parse_assignment("agents", "--set")
    assert parse_list(PARAMETERS["group_size"], "5, optimal") == [5, "optimal"]


def test_help_lists_models_topologies_and_parameter_names(capsys: pytest.CaptureFixture[str]) -> None:
    from megaactors.core.llm import PRICES

    for command in ("run", "submit", "sweep", "fork"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for model in PRICES:
            assert model in text, (command, model)
        assert "flat, star, two-tier, hierarchy" in text
        if command != "run":
            for name in PARAMETERS:
                assert f" {name} " in text, (command, name)
