"""`llmbench serve`: the engine behind an OpenAI-compatible HTTP server with continuous batching.

One engine thread owns the engine and steps it (worker.py); Starlette handlers on uvicorn's event
loop only check requests, enqueue them and read their tokens from per-request queues (app.py); the
GIL is released while a step runs. Endpoints: /v1/completions, /v1/chat/completions, /v1/models,
/health, /metrics (metrics.py). Needs the ``serve`` extra: ``pip install 'llmbench[serve]'``.

>>> from llmbench.serve import ServerConfig, create_app                      # doctest: +SKIP
>>> app = create_app(LLM("stories260K.gguf"), ServerConfig(model_name="stories"))   # an ASGI app

Tested by tests/test_serve.py against live servers on stories260K (the openai client, raw HTTP,
llmbench's eval adapter and ``llmbench bench --backend openai``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import LLMBenchError

if TYPE_CHECKING:
    from ..llm import LLM
    from .app import Server, ServerConfig


class ServeUnavailableError(LLMBenchError):
    """Starlette or uvicorn is not installed."""


def _need() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise ServeUnavailableError(f"llmbench serve needs Starlette and uvicorn ({e}): "
                                    "pip install 'llmbench[serve]'") from None


def create_app(llm: LLM, config: ServerConfig) -> Server:
    """The server for ``llm``: ``.app`` is its ASGI application, ``.worker`` its engine thread."""
    _need()
    from .app import Server

    return Server(llm, config)


def __getattr__(name: str):
    if name in ("Server", "ServerConfig"):
        _need()
        from . import app

        return getattr(app, name)
    raise AttributeError(name)


__all__ = ["ServeUnavailableError", "Server", "ServerConfig", "create_app"]
