"""Scenario event chains: scheduled, triggered, chained and injected events.

An event is a plain JSON-able dict (so scenario files, YAML, checkpoints and the command line
all hold the same thing)::

    {"name": "fact_check", "kind": "fact_check", "headline": "Fact-check: the claim is false",
     "recovery": 0.3,                                        # kind-specific fields
     "when": {"metric": "misinformation_ratio", "above": 0.3},   # triggered ...
     "round": 4,                                             # ... or scheduled (one of the two)
     "then": [{"after": 2, "kind": "news", "headline": "...", "shift": 0.2}]}   # chained

Kinds (what the event does in the round it fires):
    "news": every user sees the headline; it pulls opinions by ``shift`` (as the scenario's
        own news events).
    "fact_check": a news item (``shift`` default 0) after which each misinformed user
        recovers with probability ``recovery`` (default 0.3).
    "misinformation": an outbreak: each susceptible-weighted user becomes misinformed with
        probability ``share`` · susceptibility / mean susceptibility (``share`` default 0.05).

Timing: a scheduled event fires at the start of round ``round``. A trigger is checked on the
metrics of every round (``above`` / ``below`` a threshold, strictly) and, when it holds, its
event fires at the start of the next round (``delay`` more rounds if given); a trigger fires
once unless ``"repeat": true`` (then at most once per round). ``then`` lists events that
fire ``after`` rounds (default 1) after their parent fired. ``EventSchedule.inject`` adds an
event mid-run (the env's ``inject_event``); an event with neither ``round`` nor ``when``
fires at the start of the next round played.

Every random draw comes from ``Simulation.rng(t, Stream.EVENTS)``; the schedule's state (the
pending events, the triggers' state and the log) is plain lists/dicts, part of the
checkpoint.

Event files (``events="file.yaml"`` / ``.yml`` / ``.json``, UTF-8) hold a list of events or
``{"events": [...]}`` (no other top-level key). Before anything is expanded, a file is checked
against :data:`MAX_EVENTS_FILE_BYTES` and :data:`MAX_EVENTS_DEPTH` (nesting, counted without
recursion), and YAML aliases (``*name``: the "billion laughs" and self-reference) are
refused. ``when.metric`` must be one of :data:`TRIGGER_METRICS`. Every problem is a
ValueError naming the file and the field.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np

from agent_models.types import NewsEvent
from socialenv.core.metrics import METRIC_NAMES

#: Largest events file read (bytes).
MAX_EVENTS_FILE_BYTES = 1 << 20
#: Deepest nesting of lists/dicts in an events file (an event chain nests 2 levels per ``then``).
MAX_EVENTS_DEPTH = 64
#: Longest chain of ``then`` events.
MAX_CHAIN_DEPTH = 16
#: The round metrics a trigger may watch (``when.metric``); the activity ones only with activity.
TRIGGER_METRICS: tuple[str, ...] = (
    *METRIC_NAMES,
    "policy_share",
    "events_fired",
    "activity_excitation_news",
    "activity_excitation_notifications",
)

EVENT_KINDS = ("news", "fact_check", "misinformation")
_KIND_FIELDS = {
    "news": {"headline": "", "shift": 0.0},
    "fact_check": {
        "headline": "Fact-check: the circulating claim is false.",
        "shift": 0.0,
        "recovery": 0.3,
    },
    "misinformation": {"headline": "", "share": 0.05},
}
_COMMON_FIELDS = {"name", "kind", "round", "when", "then", "after", "delay", "repeat"}


def _fail(name: str, allowed: str, value: Any) -> None:
    raise ValueError(f"{name}={value!r} is not allowed: {allowed}")


def normalize_event(spec: Any, where: str = "event", depth: int = 0) -> dict[str, Any]:
    """A validated copy of one event dict with its kind's defaults filled in."""
    if not isinstance(spec, dict):
        _fail(where, "a dict with at least 'kind' (see socialenv.mechanisms.events)", spec)
    if depth > MAX_CHAIN_DEPTH:
        _fail(where, f"event chains at most {MAX_CHAIN_DEPTH} 'then' levels deep", "a deeper chain")
    kind = spec.get("kind", "news")
    if kind not in EVENT_KINDS:
        _fail(f"{where}.kind", f"one of {EVENT_KINDS}", kind)
    allowed = _COMMON_FIELDS | set(_KIND_FIELDS[kind])
    unknown = set(spec) - allowed
    if unknown:
        _fail(where, f"keys among {sorted(allowed)} for kind {kind!r}", sorted(map(str, unknown)))
    name = spec.get("name", kind)
    if not isinstance(name, str):
        _fail(f"{where}.name", "a string", name)
    event: dict[str, Any] = {"name": name, "kind": kind}
    for key, default in _KIND_FIELDS[kind].items():
        value = spec.get(key, default)
        if isinstance(default, float):
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not math.isfinite(value)
            ):
                _fail(f"{where}.{key}", "a finite number", value)
            value = float(value)
        elif not isinstance(value, str):
            _fail(f"{where}.{key}", "a string", value)
        event[key] = value
    if kind == "news" and not event["headline"]:
        _fail(f"{where}.headline", "a non-empty string for a news event", event["headline"])
    if "shift" in event and not -1 <= event["shift"] <= 1:
        _fail(f"{where}.shift", "a number in [-1, 1]", event["shift"])
    for key in ("recovery", "share"):
        if key in event and not 0 <= event[key] <= 1:
            _fail(f"{where}.{key}", "a probability in [0, 1]", event[key])
    if "round" in spec and "when" in spec:
        _fail(where, "either 'round' (scheduled) or 'when' (triggered), not both", sorted(spec))
    if "round" in spec:
        r = spec["round"]
        if not isinstance(r, int | np.integer) or isinstance(r, bool) or r < 0:
            _fail(f"{where}.round", "an integer >= 0", r)
        event["round"] = int(r)
    if "when" in spec:
        when = spec["when"]
        if (
            not isinstance(when, dict)
            or "metric" not in when
            or len(set(when) & {"above", "below"}) != 1
            or set(when) - {"metric", "above", "below"}
        ):
            _fail(
                f"{where}.when",
                "{'metric': name, 'above': x} or {'metric': name, 'below': x}",
                when,
            )
        op = "above" if "above" in when else "below"
        if (
            not isinstance(when[op], int | float)
            or isinstance(when[op], bool)
            or not math.isfinite(when[op])
        ):
            _fail(f"{where}.when.{op}", "a finite number", when[op])
        if when["metric"] not in TRIGGER_METRICS:
            _fail(
                f"{where}.when.metric",
                f"one of the round metrics {list(TRIGGER_METRICS)}",
                when["metric"],
            )
        event["when"] = {"metric": when["metric"], op: float(when[op])}
        event["repeat"] = bool(spec.get("repeat", False))
    for key in ("after", "delay"):
        if key in spec:
            value = spec[key]
            if (
                not isinstance(value, int | np.integer)
                or isinstance(value, bool)
                or value < (1 if key == "after" else 0)
            ):
                _fail(
                    f"{where}.{key}",
                    "an integer >= 1" if key == "after" else "an integer >= 0",
                    value,
                )
            event[key] = int(value)
    then = spec.get("then", [])
    if not isinstance(then, list):
        _fail(f"{where}.then", "a list of events", then)
    event["then"] = [
        normalize_event(child, f"{where}.then[{i}]", depth + 1) for i, child in enumerate(then)
    ]
    for i, child in enumerate(event["then"]):
        if "round" in child or "when" in child:
            _fail(
                f"{where}.then[{i}]",
                "a chained event without 'round'/'when' (it fires 'after' rounds)",
                child,
            )
    return event


def load_events(spec: Any) -> list[dict[str, Any]]:
    """Events from a list of dicts, or a path to a YAML/JSON file holding a list or a dict
    with an ``events`` list (limits and checks: see the module doc)."""
    if spec is None:
        return []
    if isinstance(spec, str | Path):
        path = Path(spec)
        spec = read_events_file(path)
        try:
            return [normalize_event(e, f"events[{i}]") for i, e in enumerate(spec)]
        except ValueError as err:
            raise ValueError(f"events file {path}: {err}") from None
    if not isinstance(spec, list | tuple):
        _fail("events", "a list of event dicts or a .yaml/.yml/.json file", spec)
    return [normalize_event(e, f"events[{i}]") for i, e in enumerate(spec)]


def read_events_file(path: Path) -> list[Any]:
    """The list of raw event dicts in an events file, within the limits of the module doc."""
    from policysim_infra.datafile import read_data_file

    def fail(why: str) -> ValueError:
        return ValueError(f"events file {path}: {why}")

    if not path.exists():
        raise FileNotFoundError(f"events file {path} does not exist")
    if path.suffix not in (".yaml", ".yml", ".json"):
        _fail("events", "a list of event dicts or a .yaml/.yml/.json file", str(path))
    spec = read_data_file(
        path, "events file", max_bytes=MAX_EVENTS_FILE_BYTES, max_depth=MAX_EVENTS_DEPTH
    )
    if isinstance(spec, dict):
        if set(spec) != {"events"}:
            raise fail(
                f"top-level keys {sorted(map(str, spec))} are not allowed: a list of events "
                "or {'events': [...]}"
            )
        spec = spec["events"]
    if not isinstance(spec, list):
        raise fail(f"events={type(spec).__name__} is not allowed: a list of event dicts")
    return spec


class EventSchedule:
    """The events of one episode. Per round: ``start`` returns the news of the events firing,
    ``apply_fired`` applies their effects once the users acted, ``check_triggers`` looks at the
    round's metrics."""

    def __init__(self, events: list[dict[str, Any]] | None = None) -> None:
        self.declared = [normalize_event(e) for e in (events or [])]
        self.reset()

    def reset(self) -> None:
        self.pending: list[dict[str, Any]] = [
            copy.deepcopy(e) for e in self.declared if "round" in e
        ]
        self.triggers: list[dict[str, Any]] = [
            {"event": copy.deepcopy(e), "fired": False} for e in self.declared if "when" in e
        ]
        self.log: list[dict[str, Any]] = []
        self._firing: list[dict[str, Any]] = []
        for e in self.declared:
            if "round" not in e and "when" not in e:
                self.pending.append({**copy.deepcopy(e), "round": 0})

    def inject(self, spec: dict[str, Any], current_round: int) -> dict[str, Any]:
        """Add an event mid-run; returns its normalized form. A scheduled round must not be in
        the past; an event with neither ``round`` nor ``when`` fires in ``current_round``."""
        event = normalize_event(spec)
        if "when" in event:
            self.triggers.append({"event": event, "fired": False})
            return event
        event.setdefault("round", current_round)
        if event["round"] < current_round:
            _fail("event.round", f"a round >= the current round {current_round}", event["round"])
        event["cause"] = "injected"
        self.pending.append(event)
        return event

    def start(self, t: int) -> list[NewsEvent]:
        """Events firing at the start of round ``t``; returns their news items."""
        self._firing = [e for e in self.pending if e["round"] == t]
        self.pending = [e for e in self.pending if e["round"] != t]
        return [
            NewsEvent(t, e["headline"], e.get("shift", 0.0)) for e in self._firing if e["headline"]
        ]

    def apply_fired(self, t: int, users: Any, rng: np.random.Generator) -> int:
        """Apply the effects of the events that fired at the start of round ``t`` to ``users``
        (the world's ``UserState``) and schedule their chains; returns how many fired."""
        fired = self._firing
        self._firing = []
        n = len(users.misinformed)
        for event in fired:
            u = rng.random(n)
            if event["kind"] == "fact_check":
                users.misinformed &= ~(u < event["recovery"])
            elif event["kind"] == "misinformation":
                weight = users.susceptibility / max(float(users.susceptibility.mean()), 1e-8)
                users.misinformed |= u < event["share"] * weight
            for child in event["then"]:
                self.pending.append(
                    {
                        **copy.deepcopy(child),
                        "round": t + child.get("after", 1),
                        "cause": f"after {event['name']}",
                    }
                )
            self.log.append(
                {
                    "round": t,
                    "name": event["name"],
                    "kind": event["kind"],
                    "cause": event.get("cause", "scheduled"),
                }
            )
        return len(fired)

    def check_triggers(self, t: int, metrics: dict[str, float]) -> None:
        """Schedule the events whose trigger holds on round ``t``'s ``metrics``."""
        for trigger in self.triggers:
            if trigger["fired"] and not trigger["event"]["repeat"]:
                continue
            when = trigger["event"]["when"]
            if when["metric"] not in metrics:  # an activity metric on an env without activity
                raise ValueError(
                    f"event {trigger['event']['name']!r}: when.metric={when['metric']!r} is not a round "
                    f"metric; allowed: {sorted(metrics)}"
                )
            value = metrics[when["metric"]]
            hit = value > when["above"] if "above" in when else value < when["below"]
            if hit:
                trigger["fired"] = True
                event = {
                    k: copy.deepcopy(v)
                    for k, v in trigger["event"].items()
                    if k not in ("when", "repeat")
                }
                event["round"] = t + 1 + event.get("delay", 0)
                event["cause"] = f"{when['metric']}={value:.4g}"
                self.pending.append(event)

    def state_dict(self) -> dict[str, Any]:
        """Plain lists/dicts (JSON-able)."""
        return copy.deepcopy({"pending": self.pending, "triggers": self.triggers, "log": self.log})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = copy.deepcopy(state["pending"])
        self.triggers = copy.deepcopy(state["triggers"])
        self.log = copy.deepcopy(state["log"])
        self._firing = []
