"""The JSON-RPC protocol, answering requests pygls cannot read instead of leaving them unanswered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol


@dataclass
class _Unreadable:
    """A request whose parameters do not fit its method: answered with the error, not dropped."""

    id: Any
    error: JsonRpcException


class AnsweringProtocol(LanguageServerProtocol):
    # pygls 2.1 logs a request it cannot structure and never answers it, leaving the client
    # waiting; JSON-RPC wants an error response with the request's id.
    def structure_message(self, data):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "method" in data and isinstance(data.get("id"), (int, str)):
                return _Unreadable(data["id"], exc)
            raise

    def handle_message(self, message):
        if isinstance(message, _Unreadable):
            self._send_response(
                message.id,
                error=types.ResponseError(code=message.error.code, message=message.error.message),
            )
            return
        super().handle_message(message)
