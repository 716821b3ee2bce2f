"""docs/configuration.md, generated from the configuration model (python -m engram_pipelines.config.reference)."""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engram_pipelines.config.model import ANALYSES, ENV_OVERRIDES, ENV_SECONDS_TO_DAYS, AnalysisSwitch, Config

HEADER = """# Configuration reference

Generated from `engram_pipelines/config/model.py` by `python -m engram_pipelines.config.reference`; a test keeps it
current. Settings come from the defaults below, then the YAML file (`--config`, else `ENGRAM_CONFIG`, else
`./engram.yaml`), then the environment variables named here (the names the
[seeds](concepts.md#where-the-rules-come-from-the-seeds) used). Thresholds are validated at
start: an invalid value stops the command with a message naming the setting. `namespaces:` overrides the
`decay`, `promotion`, `retention` and `analyses` sections per namespace (an exact name or a glob such as
`agent:*`; exact names win).
"""


def _env_names() -> dict[str, str]:
    names = {".".join(path): env for env, (path, _) in ENV_OVERRIDES.items()}
    names.update({".".join(path): f"{env} (seconds)" for env, path in ENV_SECONDS_TO_DAYS.items()})
    return names


def _default(value: Any) -> str:
    text = json.dumps(value, default=lambda o: o.model_dump() if isinstance(o, BaseModel) else str(o))
    return text if len(text) <= 60 else text[:57] + "..."


def _type(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type(a) for a in args).replace("NoneType", "null")
    if origin is not None:
        return f"{origin.__name__} of " + ", ".join(_type(a) for a in args)
    return getattr(annotation, "__name__", str(annotation))


def render() -> str:
    env = _env_names()
    out = [HEADER]
    defaults = Config()
    for section, info in Config.model_fields.items():
        model = info.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        out += [f"## `{section}`", "", (model.__doc__ or "").strip(), ""]
        out += ["| setting | type | default | environment | meaning |", "|---|---|---|---|---|"]
        out += _rows(section, model, getattr(defaults, section), env)
        out.append("")
    out += _switches()
    return "\n".join(out)


def _switches() -> list[str]:
    """The `analyses` section: one switch per analysis, the same two settings each."""
    doc = " ".join((Config.model_fields["analyses"].description or "").split())
    out = ["## `analyses`", "", doc, "", "| setting | type | default | meaning |", "|---|---|---|---|"]
    for name, field in AnalysisSwitch.model_fields.items():
        description = " ".join((field.description or "").split())
        out.append(
            f"| `analyses.<analysis>.{name}` | {_type(field.annotation)} | `{_default(field.default)}` | {description} |"
        )
    out += ["", "Analyses: " + ", ".join(f"`{a}`" for a in ANALYSES) + ".", ""]
    return out


def _rows(prefix: str, model: type[BaseModel], value: BaseModel, env: dict[str, str]) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}"
        current = getattr(value, name)
        if isinstance(current, BaseModel):
            rows.append(f"| **{path}** | section | | | {(type(current).__doc__ or '').strip()} |")
            rows += _rows(path, type(current), current, env)
            continue
        description = " ".join((field.description or "").split()).replace("|", "\\|")  # one table row
        rows.append(
            f"| `{path}` | {_type(field.annotation)} | `{_default(current)}` | {env.get(path, '')} | {description} |"
        )
    return rows


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/configuration.md")
    target.write_text(render())
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
