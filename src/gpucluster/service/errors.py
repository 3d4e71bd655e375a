"""The one error type the API answers with: an HTTP status and a JSON body naming ``where`` and ``why``."""

from __future__ import annotations


class ApiError(Exception):
    """A user error: HTTP ``status`` with a JSON body naming ``where`` and ``why``."""

    def __init__(self, status: int, where: str, why: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{where}: {why}")
        self.status = status
        self.where = where
        self.why = why
        self.headers = headers or {}


def error_body(status: int, where: str, why: str) -> dict[str, object]:
    return {"error": why, "where": where, "status": status}


__all__ = ["ApiError", "error_body"]
