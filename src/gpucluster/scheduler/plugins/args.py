"""Typed plugin arguments: every factory validates its ``args`` mapping through a pydantic model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from gpucluster.scheduler.framework import PluginArgsError


class PluginArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


A = TypeVar("A", bound=PluginArgs)


def parse_args(model: type[A], plugin: str, args: Mapping[str, Any]) -> A:
    try:
        return model.model_validate(dict(args))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(args)"
        raise PluginArgsError(f"plugin {plugin}: args.{loc}: {err['msg']}") from None
