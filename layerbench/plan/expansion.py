"""Stacks a plan writes once and runs many times: sweeps and incremental stacks.

A stack's `sweep` table maps an option path to a list of values:

    [stacks.img]
    layers = [{ kind = "image", fs = "ext4" }]
    sweep = { "layers.0.fs" = ["ext4", "xfs", "btrfs"] }

expands into one stack per value, named by the values (`img[fs=ext4]`, `img[fs=xfs]`, ...);
several paths give their cross product (`img[fs=xfs,size=1G]`). A path is `layers.N.KEY`,
one more `.KEY` per level of a table option (`layers.2.options.kernel_cache`).

`incremental = true` adds each proper prefix of a stack's layers as a stack of its own,
named by the kinds of its layers (`image`, `image+overlay`), so that the reports can give
what each layer adds on top of the ones below it (see stats.marginals). A prefix that is
already a stack of the plan (the same layers and world) is that stack, not a copy; a name
taken by a different stack is qualified with the stack's own (`box:image+overlay`).

Expansion runs on the plan as written, before its layers are checked by their kinds, so
every expanded stack is checked like one written by hand; an error names the sweep."""

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_STACKS = 64  # the plan's own limit on stacks, after expansion too


@dataclass(frozen=True)
class SweepPoint:
    """One expanded stack of a sweep: the stack it came from and its values by label."""

    group: str
    values: dict[str, Any]
    paths: dict[str, str]  # label -> option path

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "values": self.values, "paths": self.paths}


@dataclass(frozen=True)
class Increment:
    """A stack that is its previous stack with one more layer on top."""

    previous: str
    layer: str  # the added layer's kind

    def as_dict(self) -> dict[str, Any]:
        return {"previous": self.previous, "layer": self.layer}


@dataclass
class Expanded:
    """The plan's stacks as they run, in order, with where each expanded one came from."""

    stacks: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> stack table
    sweeps: dict[str, SweepPoint] = field(default_factory=dict)
    increments: dict[str, Increment] = field(default_factory=dict)


OptionNames = Callable[[str], list[str] | None]  # a layer kind -> its option names (None: no such kind)


def expand(stacks: dict[str, dict[str, Any]], option_names: OptionNames) -> Expanded:
    """Every stack table (as written, with its `sweep` and `incremental` keys) expanded;
    raises ValueError naming the stack and key."""
    swept = Expanded()
    for name, table in stacks.items():
        for point_name, point_table, point in _swept(name, table, option_names):
            if point_name in swept.stacks:
                raise ValueError(f"stacks.{name}.sweep: expands to {point_name!r}, which is already a stack")
            swept.stacks[point_name] = point_table
            if point is not None:
                swept.sweeps[point_name] = point
    result = Expanded(sweeps=swept.sweeps)
    written = dict(swept.stacks)
    for name, table in swept.stacks.items():
        if table.get("incremental"):
            previous = _empty_stack(table, written)
            for size in range(1, len(_kinds(table)) + 1):
                own = size == len(_kinds(table))
                step = name if own else _prefix_name(name, table, size, written, result.stacks)
                if not own:
                    result.stacks.setdefault(step, written.get(step) or _prefix_table(table, size))
                if previous is not None and step not in result.increments:
                    result.increments[step] = Increment(previous, _kinds(table)[size - 1])
                previous = step
        result.stacks[name] = table
    if len(result.stacks) > MAX_STACKS:
        raise ValueError(
            f"stacks: the sweeps and incremental stacks expand to {len(result.stacks)} stacks; "
            f"at most {MAX_STACKS}"
        )
    return result


def strip(table: dict[str, Any]) -> dict[str, Any]:
    """A stack table without the expansion keys: what the stack's model checks."""
    return {key: value for key, value in table.items() if key not in ("sweep", "incremental")}


# ---- sweeps ----------------------------------------------------------------------------


def _swept(
    name: str, table: dict[str, Any], option_names: OptionNames
) -> list[tuple[str, dict[str, Any], SweepPoint | None]]:
    sweep = table.get("sweep")
    if sweep is None:
        return [(name, table, None)]
    where = f"stacks.{name}.sweep"
    if not isinstance(sweep, dict) or not sweep:
        raise ValueError(
            f'{where}: a table of option paths to value lists, like {{ "layers.0.fs" = ["ext4", "xfs"] }}'
        )
    paths = list(sweep)
    for path, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f'{where}."{path}": a list of one or more values to sweep')
        if len({_shown(v) for v in values}) != len(values):
            raise ValueError(f'{where}."{path}": a value is given twice')
    labels = _labels(paths)
    points: list[tuple[str, dict[str, Any], SweepPoint | None]] = []
    for combination in itertools.product(*(sweep[path] for path in paths)):
        expanded = copy.deepcopy({k: v for k, v in table.items() if k != "sweep"})
        for path, value in zip(paths, combination, strict=True):
            set_option(expanded, path, value, where, option_names)
        values = {labels[path]: value for path, value in zip(paths, combination, strict=True)}
        point_name = f"{name}[" + ",".join(f"{label}={_shown(v)}" for label, v in values.items()) + "]"
        points.append(
            (point_name, expanded, SweepPoint(name, values, {labels[path]: path for path in paths}))
        )
    return points


def _labels(paths: list[str]) -> dict[str, str]:
    """Each path's label in the stack names: its last key, or the whole path where two
    paths share one."""
    last = [path.rsplit(".", 1)[-1] for path in paths]
    return {path: key if last.count(key) == 1 else path for path, key in zip(paths, last, strict=True)}


def set_option(table: dict[str, Any], path: str, value: Any, where: str, option_names: OptionNames) -> None:
    parts = path.split(".")
    layers = table.get("layers", [])
    if len(parts) < 3 or parts[0] != "layers" or not parts[1].isdigit() or not all(parts[2:]):
        raise ValueError(
            f'{where}."{path}": an option path is layers.N.KEY (N counts layers from 0, the bottom), '
            "with one more .KEY per level of a table option"
        )
    index = int(parts[1])
    if index >= len(layers) or not isinstance(layers[index], dict):
        raise ValueError(f'{where}."{path}": the stack has {len(layers)} layer(s), numbered from 0')
    node = layers[index]
    if parts[2] == "kind":
        raise ValueError(
            f'{where}."{path}": a sweep sets a layer\'s options, not its kind (write a stack per kind)'
        )
    known = option_names(str(node.get("kind")))
    if known is not None and parts[2] not in known:
        raise ValueError(
            f'{where}."{path}": layer kind {node.get("kind")} has no option {parts[2]}; '
            f"its options: {', '.join(known)}"
        )
    for key in parts[2:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ValueError(f'{where}."{path}": {key} is not a table option')
        node = child
    node[parts[-1]] = value


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "+".join(_shown(v) for v in value)
    if isinstance(value, dict):
        return "+".join(f"{k}:{_shown(v)}" for k, v in value.items())
    return str(value)


# ---- incremental stacks ----------------------------------------------------------------


def _kinds(table: dict[str, Any]) -> list[str]:
    return [str(layer.get("kind")) if isinstance(layer, dict) else "?" for layer in table.get("layers", [])]


def _empty_stack(table: dict[str, Any], written: dict[str, dict[str, Any]]) -> str | None:
    """A stack of the plan with no layers, the same world and the same limits: what the
    first layer adds to."""
    return next((n for n, t in written.items() if not t.get("layers") and _same_setting(t, table)), None)


def _same_setting(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same world and the same resources (limits): the stacks differ only in layers."""
    return a.get("world") == b.get("world") and a.get("limits") == b.get("limits")


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("layers", []) == b.get("layers", []) and _same_setting(a, b)


def _prefix_table(table: dict[str, Any], size: int) -> dict[str, Any]:
    prefix = {k: copy.deepcopy(v) for k, v in strip(table).items() if k != "description"}
    prefix["layers"] = copy.deepcopy(table.get("layers", [])[:size])
    prefix["description"] = f"the first {size} layer(s) of {table.get('description') or 'its stack'}"
    return prefix


def _prefix_name(
    name: str,
    table: dict[str, Any],
    size: int,
    written: dict[str, dict[str, Any]],
    added: dict[str, dict[str, Any]],
) -> str:
    """The name of the stack of the first size layers: a stack of the plan with those
    layers, else the kinds joined by '+', qualified with the stack's name when taken."""
    prefix = _prefix_table(table, size)
    for other, other_table in {**written, **added}.items():
        if _same(other_table, prefix):
            return other
    plain = "+".join(_kinds(table)[:size])
    taken = plain in written or plain in added
    return f"{name}:{plain}" if taken else plain


def describe(sweeps: dict[str, dict[str, Any]], increments: dict[str, dict[str, Any]]) -> list[str]:
    """What the expansion made, a line per sweep and per incremental chain (for `check`)."""
    lines = []
    groups: dict[str, list[str]] = {}
    for name, point in sweeps.items():
        groups.setdefault(point["group"], []).append(name)
    for group, names in groups.items():
        paths = ", ".join(sweeps[names[0]]["paths"].values())
        lines.append(f"sweep {group} over {paths}: {', '.join(names)}")
    tops = [name for name in increments if not any(step["previous"] == name for step in increments.values())]
    for top in tops:
        chain = [top]
        while (step := increments.get(chain[0])) is not None:
            chain.insert(0, step["previous"])
        added = ", ".join(f"{name} adds {increments[name]['layer']}" for name in chain[1:])
        lines.append(f"incremental {top}: {' -> '.join(chain)} ({added})")
    return lines
