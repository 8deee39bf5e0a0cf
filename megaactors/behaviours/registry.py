"""Behaviours by name or import path: what is installed, and building one for a run.

A run names its agent logic with one string: a registered name (``chat-round``, or
any name a package declares in the ``megaactors.behaviours`` entry-point group, the
ecosystem's convention for plug-ins) or an import path ``package.module:Class``.
Its *behaviour parameters* are the class's constructor keyword arguments; an
argument named like a run parameter (``rounds``, ``seed``, ``message_bytes``,
``output_tokens``, …) receives the run's value, so ``--rounds 3`` reaches any
behaviour that takes ``rounds``.

A class is a behaviour when it has ``init``, ``on_start``, ``on_batch`` and
``on_reply`` (and ``on_tool`` if it calls tools); an instance without a ``name``
(the label errors and traces use) gets the name the run gave. Its *version* is recorded with
every run so that a resumed or forked run rebuilds the same logic: the class's
``version`` attribute if it has one, else the installed distribution's version for
an entry point, else a digest of the module's source file.

Declaring a behaviour in a package (``pyproject.toml``)::

    [project.entry-points."megaactors.behaviours"]
    gossip = "my_agents.gossip:Gossip"
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import metadata
from typing import Any

from megaactors.errors import BehaviourLoadError

__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "REQUIRED_METHODS",
    "BehaviourInfo",
    "build",
    "describe",
    "installed",
    "resolve",
]

ENTRY_POINT_GROUP = "megaactors.behaviours"
BUILT_IN: dict[str, str] = {
    "chat-round": "megaactors.behaviours.chat_round:ChatRound",
    "megaagent": "megaactors.behaviours.megaagent.organised:OrganisedMegaAgent",
}
"""The behaviours megaactors ships (also declared as entry points in its pyproject.toml;
listed here too so that they resolve from a source tree that was never installed)."""
REQUIRED_METHODS = ("init", "on_start", "on_batch", "on_reply")


@dataclass(frozen=True)
class BehaviourInfo:
    """A resolved behaviour: its class, where it comes from and what it accepts."""

    name: str
    """The name a run gives: registered, or ``package.module:Class``."""
    target: str
    """``module:Class`` it resolves to."""
    cls: type
    parameters: tuple[inspect.Parameter, ...]
    """Constructor keyword arguments (``self``, ``*args`` left out)."""
    open_ended: bool
    """The constructor also takes ``**kwargs``: any parameter name is accepted."""
    source: str
    """Where the version comes from: ``built-in``, ``entry point`` or ``import path``."""

    @cached_property
    def version(self) -> str:
        """The class's ``version`` attribute, else its distribution's version (built-ins:
        megaactors'), else a digest of its module's source file."""
        declared = getattr(self.cls, "version", None)
        if isinstance(declared, (str, int, float)) and not isinstance(declared, bool):
            return str(declared)
        if self.source == "built-in":
            from megaactors import __version__

            return __version__
        if self.source == "entry point":
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP, name=self.name):
                if ep.dist is not None:
                    return ep.dist.version
        return _source_digest(self.cls)

    @property
    def summary(self) -> str:
        """The first line of the class's docstring."""
        doc = inspect.getdoc(self.cls) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""

    @property
    def parameter_names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def check_parameters(self, params: Mapping[str, Any], run_parameters: Mapping[str, Any]) -> None:
        """Raise :class:`BehaviourLoadError` for a parameter the constructor does not
        take, or a required one that neither ``params`` nor the run gives."""
        unknown = sorted(set(params) - set(self.parameter_names))
        if unknown and not self.open_ended:
            accepted = ", ".join(self.parameter_names) or "none"
            raise BehaviourLoadError(
                f"behaviour {self.name!r} takes no parameter {', '.join(map(repr, unknown))}; it accepts: {accepted}"
            )
        missing = [
            p.name
            for p in self.parameters
            if p.default is inspect.Parameter.empty and p.name not in params and p.name not in run_parameters
        ]
        if missing:
            raise BehaviourLoadError(
                f"behaviour {self.name!r} needs parameter(s) {', '.join(missing)} "
                f"(give them as --behaviour-param NAME=VALUE)"
            )


def installed() -> dict[str, str]:
    """Every registered behaviour name and the ``module:Class`` it names: the
    built-ins and the ``megaactors.behaviours`` entry points of installed packages."""
    out = dict(BUILT_IN)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        out.setdefault(ep.name, ep.value)
    return dict(sorted(out.items()))


def resolve(name: str) -> BehaviourInfo:
    """The behaviour ``name`` names; :class:`BehaviourLoadError` says why not."""
    if not isinstance(name, str) or not name.strip():
        raise BehaviourLoadError(f"a behaviour is a registered name or package.module:Class, got {name!r}")
    return _resolve(name.strip())


@lru_cache(maxsize=64)
def _resolve(name: str) -> BehaviourInfo:
    registered = installed()
    if name in BUILT_IN and registered[name] == BUILT_IN[name]:
        target, source = BUILT_IN[name], "built-in"
    elif name in registered:
        target, source = registered[name], "entry point"
    elif ":" in name:
        target, source = name, "import path"
    else:
        raise BehaviourLoadError(
            f"unknown behaviour {name!r}: not a registered name ({', '.join(registered)}) "
            "and not an import path package.module:Class"
        )
    cls = _load(name, target)
    _check_protocol(name, cls)
    parameters, open_ended = _constructor(cls)
    return BehaviourInfo(name, target, cls, parameters, open_ended, source)


def build(name: str, params: Mapping[str, Any], run_parameters: Mapping[str, Any]) -> Any:
    """An instance of behaviour ``name`` made with ``params`` and, for constructor
    arguments named like run parameters, the run's values."""
    info = resolve(name)
    info.check_parameters(params, run_parameters)
    kwargs = {p.name: run_parameters[p.name] for p in info.parameters if p.name in run_parameters}
    kwargs.update(params)
    try:
        behaviour = info.cls(**kwargs)
    except Exception as exc:
        given = ", ".join(f"{k}={v!r}" for k, v in sorted(params.items())) or "no parameters"
        raise BehaviourLoadError(
            f"behaviour {name!r} refused its parameters ({given}): {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(getattr(behaviour, "name", None), str):
        try:  # runtimes name the behaviour in their errors: the name the run gave
            behaviour.name = name
        except AttributeError:
            raise BehaviourLoadError(f"behaviour {name!r}: give the class a 'name' attribute (a string)") from None
    return behaviour


def describe(name: str, run_parameters: Collection[str] = ()) -> dict[str, Any]:
    """What ``megaactors behaviours`` shows of one behaviour (JSON-ready): each
    constructor parameter's default (or that it is required), and whether the run
    parameter of the same name (among ``run_parameters``) fills it."""
    info = resolve(name)
    parameters: dict[str, dict[str, Any]] = {}
    for p in info.parameters:
        entry: dict[str, Any] = {"required": True} if p.default is inspect.Parameter.empty else {}
        if not entry:
            entry["default"] = _jsonable(p.default)
        if p.name in run_parameters:
            entry["run_parameter"] = True
        parameters[p.name] = entry
    return {
        "name": info.name,
        "target": info.target,
        "version": info.version,
        "summary": info.summary,
        "parameters": parameters,
        "any_parameter": info.open_ended,
    }


def check_jsonable(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` as plain JSON data (it is stored with the run); else an error naming the parameter."""
    out = {}
    for key, value in params.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise BehaviourLoadError(f"behaviour {name!r}: parameter name {key!r} is not a Python identifier")
        try:
            out[key] = json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise BehaviourLoadError(
                f"behaviour {name!r}: parameter {key}={value!r} is not plain JSON data ({exc})"
            ) from None
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------- loading


def _load(name: str, target: str) -> type:
    module_name, _, qualname = target.partition(":")
    if not module_name or not qualname:
        raise BehaviourLoadError(f"behaviour {name!r}: an import path is package.module:Class, got {target!r}")
    try:
        module = _import(module_name)
    except BehaviourLoadError as exc:
        raise BehaviourLoadError(f"behaviour {name!r}: {exc}") from None
    except Exception as exc:
        raise BehaviourLoadError(
            f"behaviour {name!r}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise BehaviourLoadError(f"behaviour {name!r}: module {module_name!r} has no attribute {qualname!r}")
    if not inspect.isclass(obj):
        raise BehaviourLoadError(f"behaviour {name!r}: {target} is a {type(obj).__name__}, not a class")
    return obj


def _import(module_name: str) -> Any:
    """Import a module, also from the current directory (as ``python -m`` would)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the module imports something that is missing
        here = os.getcwd()
        if here in sys.path:
            raise BehaviourLoadError(
                f"no module named {module_name!r} (not installed, not on PYTHONPATH, not in {here})"
            ) from None
        sys.path.append(here)
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as again:
            if again.name is not None and module_name.startswith(again.name):
                raise BehaviourLoadError(
                    f"no module named {module_name!r} (not installed, not on PYTHONPATH, not in {here})"
                ) from None
            raise


def _check_protocol(name: str, cls: type) -> None:
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise BehaviourLoadError(
            f"behaviour {name!r}: class {cls.__qualname__} is not a behaviour: it lacks "
            f"{', '.join(missing)} (a behaviour defines {', '.join(REQUIRED_METHODS)}, and on_tool if it calls tools)"
        )


def _constructor(cls: type) -> tuple[tuple[inspect.Parameter, ...], bool]:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return (), True
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = tuple(p for p in signature.parameters.values() if p.kind in kinds)
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    return params, open_ended


def _source_digest(cls: type) -> str:
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    if path is None:
        return "unversioned"
    try:
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return "unversioned"


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
