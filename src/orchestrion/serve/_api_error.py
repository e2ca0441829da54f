"""The error a serve route answers with: ``{"error": {message, type, param, code}}`` (OpenAI's shape)."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error returned to the client as ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, *, code: str, type: str = "invalid_request_error",
                 param: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, code=self.code, param=self.param)


def error_body(message: str, *, type: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}
