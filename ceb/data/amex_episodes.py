"""AMEX episode files and element annotations, every field checked (layout: :mod:`ceb.data.amex`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ceb.data.amex_screen import TAP, Element, parse_box, read_point, to_element
from ceb.data.sources import json_files_under, kind, optional_str, required_str
from ceb.errors import ConfigError, DataError, Problem

__all__ = ["Episode", "GoldStep", "element_files", "episode_files", "read_elements", "read_episode"]


@dataclass(frozen=True, slots=True)
class GoldStep:
    """One recorded human step, checked; points in pixels, ``action`` upper case, ``touch`` set for ``TAP``."""

    step_id: int
    image_path: str
    action: str
    touch: tuple[float, float] | None
    lift: tuple[float, float] | None
    type_text: str | None
    device_dim: tuple[float, float] | None
    package_name: str | None


@dataclass(frozen=True, slots=True)
class Episode:
    """One AMEX episode, checked; ``episode_id`` is unique over all episode files."""

    episode_id: str
    instruction: str
    steps: tuple[GoldStep, ...]
    file: str


def episode_files(episodes: str | Path | Sequence[str | Path]) -> tuple[list[Path], Path]:
    """The episode files in stream order, and the default ``element_anno`` directory.

    A directory means every ``*.json`` under it, in natural order of the relative path; ``element_anno`` is
    looked for beside the first argument (a directory) or beside the first file's directory.

    Raises:
        ConfigError: No file is given.
        DataError: A directory holds no ``*.json`` file.
    """
    given = [Path(episodes)] if isinstance(episodes, str | Path) else [Path(e) for e in episodes]
    if not given:
        raise ConfigError("convert_amex needs at least one episode file")
    files: list[Path] = []
    for path in given:
        if path.is_dir():
            found = json_files_under(path)
            if not found:
                raise DataError(
                    Problem(str(path), 0, "<file>", "an episode directory must hold AMEX *.json files (at any depth)")
                )
            files.extend(found)
        else:
            files.append(path)
    first = given[0]
    base = first.parent if first.is_dir() else first.parent.parent
    return files, base / "element_anno"


def _load_object(path: Path, what: str, episode_id: str | None = None, step: int | None = None) -> dict[str, Any]:
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise DataError(
            Problem(str(path), 0, "<file>", f"cannot read the {what}: {exc.strerror or exc}", episode_id, step)
        ) from exc
    except orjson.JSONDecodeError as exc:
        raise DataError(
            Problem(str(path), exc.lineno, "<file>", f"not valid JSON: {exc.msg}", episode_id, step)
        ) from exc
    if not isinstance(data, dict):
        raise DataError(Problem(str(path), 0, "<file>", f"the {what} must be a JSON object", episode_id, step))
    return data


def read_episode(path: Path) -> Episode:
    """Read and check one episode file.

    Raises:
        DataError: Unreadable, not an object, or off-layout (names file, ``episode_id``, step, field).
    """
    record = _load_object(path, "episode file")
    eid: str | None = None

    def fail(field: str, message: str, step: int | None = None) -> DataError:
        return DataError(Problem(str(path), 0, field, message, eid, step))

    eid = required_str(record, "episode_id", fail)
    instruction = required_str(record, "instruction", fail)
    raw_steps = record.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise fail("steps", "missing, empty or not a list")
    steps: list[GoldStep] = []
    ids: set[int] = set()
    for t, raw in enumerate(raw_steps):
        at = f"steps[{t}]"

        def step_fail(field: str, message: str, t: int = t, at: str = at) -> DataError:
            return fail(f"{at}.{field}", message, t)

        if not isinstance(raw, dict):
            raise fail(at, f"must be an object, got {kind(raw)}", t)
        step_id = raw.get("step_id")
        if type(step_id) is not int:
            raise step_fail("step_id", f"missing or not an integer, got {kind(step_id)}")
        if step_id in ids:
            raise step_fail("step_id", f"step_id {step_id} repeats within the episode")
        ids.add(step_id)
        image = required_str(raw, "image_path", step_fail)
        action = required_str(raw, "action", step_fail).strip().upper()
        touch = read_point(raw.get("touch_coord"), "touch_coord", step_fail)
        if action == TAP and touch is None:
            raise step_fail("touch_coord", "missing: a TAP step needs the human's [x, y] touch point")
        dim = read_point(raw.get("device_dim"), "device_dim", step_fail)
        if dim is not None and (dim[0] <= 0 or dim[1] <= 0):
            raise step_fail("device_dim", f"must be a positive [width, height], got {list(dim)}")
        package = raw.get("package_name")
        steps.append(
            GoldStep(
                step_id=step_id,
                image_path=image,
                action=action,
                touch=touch,
                lift=read_point(raw.get("lift_coord"), "lift_coord", step_fail),
                type_text=optional_str(raw, "type_text", step_fail),
                device_dim=dim,
                package_name=package if isinstance(package, str) and package else None,
            )
        )
    return Episode(eid, instruction, tuple(steps), str(path))


def element_files(element_dir: Path) -> dict[str, Path]:
    """``<stem> -> file`` of every ``*.json`` under ``element_dir``, at any depth.

    Raises:
        DataError: Two files share a stem (names both).
    """
    files: dict[str, Path] = {}
    for path in json_files_under(element_dir):
        if path.stem in files:
            raise DataError(
                Problem(
                    str(path),
                    0,
                    "<file>",
                    f"a second element file for screenshot {path.stem!r} (first {files[path.stem]})",
                )
            )
        files[path.stem] = path
    return files


def read_elements(element_dir: Path, files: Mapping[str, Path], episode: Episode, t: int) -> list[Element]:
    """The clickable elements of step ``t``'s screen (``<image stem>.json``), in file order.

    Raises:
        DataError: The file is missing or unreadable, or an element has no valid ``bbox``.
    """
    step = episode.steps[t]
    stem = Path(step.image_path).stem
    path = files.get(stem, element_dir / f"{stem}.json")
    if not path.is_file():
        raise DataError(
            Problem(
                str(path),
                0,
                "<file>",
                f"no element annotation for image_path {step.image_path!r} (step {t} of {episode.file})",
                episode.episode_id,
                t,
            )
        )
    data = _load_object(path, "element annotation", episode.episode_id, t)
    raw = data.get("clickable_elements")
    if not isinstance(raw, list):
        raise DataError(Problem(str(path), 0, "clickable_elements", "missing or not a list", episode.episode_id, t))
    found: list[Element] = []
    for i, element in enumerate(raw):
        box = parse_box(element.get("bbox")) if isinstance(element, dict) else None
        if box is None:
            raise DataError(
                Problem(
                    str(path),
                    0,
                    f"clickable_elements[{i}].bbox",
                    "missing or not a list of 4 finite numbers [x1, y1, x2, y2]",
                    episode.episode_id,
                    t,
                )
            )
        found.append(to_element(element, box))
    return found
