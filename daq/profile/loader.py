"""Load a TOML hardware profile into the validated `Profile`, or fail with one clear line."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from daq.profile.schema import Profile


class ProfileError(ValueError):
    """The profile is malformed. The message names the file, the key path and what is allowed."""

    def __init__(self, path: str | Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)


def _key_path(loc: tuple[Any, ...], data: Any) -> str:
    """`('channels', 3, 'scaling', 'gain')` → `channels[3:p_rod_1].scaling.gain`."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = str(item)
            if isinstance(node, list) and 0 <= item < len(node):
                node = node[item]
                if isinstance(node, dict) and isinstance(node.get("name"), str):
                    label = f"{item}:{node['name']}"
            else:
                node = None
            parts[-1:] = [f"{parts[-1] if parts else ''}[{label}]"]
            continue
        if isinstance(node, dict):
            node = node.get(item)
        else:
            node = None
        # Tagged-union branches ('linear', 'table', …) are pydantic's, not the file's keys.
        if parts and item in ("linear", "polynomial", "table") and not isinstance(node, dict):
            continue
        parts.append(str(item))
    return ".".join(parts) or "<top level>"


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the schema allows at the table holding `loc[-1]`."""
    model: Any = Profile
    for item in loc[:-1]:
        if isinstance(item, int):
            continue
        fields = getattr(model, "model_fields", {})
        if item in fields:
            model = _model_of(fields[item].annotation)
        else:  # a tagged-union branch name ('linear', …): pick that member
            model = next((m for m in _union_members(model) if _tag(m) == item), None)
        if model is None:
            return []
    return sorted(getattr(model, "model_fields", {}))


def _union_members(annotation: Any) -> list[Any]:
    return [a for a in get_args(annotation) if hasattr(a, "model_fields")] or [
        m for a in get_args(annotation) for m in _union_members(a)
    ]


def _tag(model: Any) -> Any:
    kind = model.model_fields.get("kind")
    return get_args(kind.annotation)[0] if kind is not None else None


def _model_of(annotation: Any) -> Any:
    """Unwrap Optional/list/Annotated down to the pydantic model (or a union of them)."""
    if hasattr(annotation, "model_fields"):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return annotation if len(_union_members(annotation)) > 1 else found
    return None


def _describe(err: Any, data: Any) -> str:
    loc = tuple(err["loc"])
    where = _key_path(loc, data)
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc)
        hint = f"allowed here: {', '.join(allowed)}" if allowed else "see daq/profile/schema.py"
        return f"{where}: unknown key ({hint})"
    msg = err["msg"]
    if "input" in err and kind not in ("missing",) and not isinstance(err["input"], dict | list):
        msg = f"{msg} (got {err['input']!r})"
    return f"{where}: {msg}"


def parse_profile(data: dict[str, Any], source: str | Path = "<profile>") -> Profile:
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        lines = [_describe(e, data) for e in errors]
        more = f" (+{len(lines) - 1} more: " + "; ".join(lines[1:]) + ")" if len(lines) > 1 else ""
        raise ProfileError(source, lines[0] + more) from None


def load_profile(path: str | Path) -> Profile:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(path, f"cannot read: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(path, f"not valid TOML: {exc}") from None
    return parse_profile(data, path)
