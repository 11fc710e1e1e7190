"""The ``llmbench serve`` command: load a model, start the engine thread, serve HTTP with uvicorn until
SIGTERM or Ctrl-C (running requests finish first: the drain; a second signal exits at once)."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from ..llm import ACTIVATIONS, KV_DTYPES

API_KEY_ENV = "LLMBENCH_API_KEY"


def add_parser(sub) -> None:
    """Add ``llmbench serve`` and its options to the command-line parser."""
    s = sub.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API (continuous batching)",
        description="Serve a GGUF model (or a dummy preset) over OpenAI's HTTP API: /v1/completions (echo and "
                    "logprobs included, for log-likelihood evaluation clients), /v1/chat/completions, /v1/models, "
                    "/health and Prometheus /metrics. New requests join the running batch at the next engine step "
                    "(continuous batching); --batching static waits for a full batch (or --batch-timeout) and admits "
                    "nothing until it is done, for comparison. A request beyond --max-batch running and "
                    "--max-waiting queued is answered 429 with Retry-After. SIGTERM or Ctrl-C lets running requests "
                    "finish, then exits.",
        epilog="examples:\n"
               "  llmbench serve model.gguf --port 8000\n"
               "  llmbench bench --backend openai --base-url http://127.0.0.1:8000/v1 --model model.gguf "
               "--batch 64 --request-rate 4\n"
               "  llmbench eval --backend openai --base-url http://127.0.0.1:8000/v1 --model model.gguf ...\n"
               "  LLMBENCH_API_KEY=secret llmbench serve llama-125m --host 0.0.0.0",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("model", metavar="MODEL", help="GGUF file or dummy preset[:type] (llama-125m, llama-1b:Q8_0, ...)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument("--served-model-name", help="the name clients ask for (default: MODEL as given)")
    s.add_argument("--threads", type=int, default=None, help="engine threads (default: all CPUs)")
    s.add_argument("--ctx", type=int, default=None, help="longest sequence, prompt + output (default: the model's, "
                                                         "at most 4096)")
    s.add_argument("--max-batch", type=int, default=64, help="sequences running at once (default 64)")
    s.add_argument("--max-batch-tokens", type=int, default=512, help="tokens of one engine step (default 512)")
    s.add_argument("--max-waiting", type=int, default=256,
                   help="sequences queued beyond --max-batch before requests get 429 (default 256)")
    s.add_argument("--kv-dtype", choices=list(KV_DTYPES), default="f16")
    s.add_argument("--kv-budget", help="bytes of KV cache, e.g. 2GiB (default: --max-batch full-context "
                                       "sequences, at most a quarter of free memory)")
    s.add_argument("--activations", choices=ACTIVATIONS, default="q8")
    s.add_argument("--batching", choices=("continuous", "static"), default="continuous")
    s.add_argument("--batch-timeout", type=float, default=1.0, metavar="S",
                   help="--batching static: seconds the first queued request waits for a full batch (default 1)")
    s.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"require 'Authorization: Bearer KEY' on every route but /health (default ${API_KEY_ENV})")
    s.add_argument("--chat-template", metavar="FILE|TEMPLATE",
                   help="jinja2 chat template (a file or the template itself) for models without one")
    s.add_argument("--drain-timeout", type=float, default=None, metavar="S",
                   help="on SIGTERM, seconds to let running requests finish (default: as long as they take)")
    s.add_argument("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn's log level (info logs every request)")
    s.add_argument("--step-delay", type=float, default=0.0, help=argparse.SUPPRESS)   # tests: slow the engine
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Run ``llmbench serve`` with parsed arguments until interrupted; the exit status."""
    from . import _need

    _need()
    import uvicorn

    from ..llm import LLM
    from .app import Server, ServerConfig

    for name in ("max_batch", "max_batch_tokens"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if args.max_waiting < 0:
        raise ValueError("--max-waiting must be >= 0")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be 0..65535, got {args.port}")
    template = args.chat_template
    if template and os.path.isfile(template):
        with open(template, encoding="utf-8") as f:
            template = f.read()
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))   # before the model loads: a taken port fails at once
    llm = LLM(args.model, threads=args.threads, ctx=args.ctx, kv_dtype=args.kv_dtype, kv_budget=args.kv_budget,
              max_seqs=args.max_batch, max_batch_tokens=args.max_batch_tokens, activations=args.activations)
    name = args.served_model_name or args.model
    server = Server(llm, ServerConfig(model_name=name, max_batch=args.max_batch, max_waiting=args.max_waiting,
                                      batching=args.batching, batch_timeout=args.batch_timeout, api_key=args.api_key,
                                      chat_template=template, step_delay=args.step_delay))
    config = uvicorn.Config(server.app, log_level=args.log_level, access_log=args.log_level in ("info", "debug"),
                            timeout_graceful_shutdown=args.drain_timeout, lifespan="on")
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/v1"
    print(f"llmbench serve: {name} ({llm.info['arch']}, ctx {llm.ctx}, {llm.threads} threads, {args.batching} "
          f"batching, up to {args.max_batch} sequences) at {url}" + (" (API key required)" if args.api_key else ""),
          file=sys.stderr, flush=True)
    _Uvicorn(config, server).run(sockets=[sock])
    print("llmbench serve: stopped", file=sys.stderr, flush=True)
    return 0


def _uvicorn_server():
    import contextlib

    import uvicorn

    class Uvicorn(uvicorn.Server):
        """uvicorn's server, saying on the first SIGTERM/Ctrl-C how many sequences it lets finish, exiting at
        once on a second, and returning normally after a drain (uvicorn would raise the signal again)."""

        def __init__(self, config, app_server):
            super().__init__(config)
            self.app_server = app_server

        def handle_exit(self, sig, frame) -> None:
            if self.should_exit:
                self.force_exit = True
            else:
                n = self.app_server.worker.in_flight
                print(f"llmbench serve: signal {sig}: finishing {n} running or queued sequences, then exiting "
                      "(signal again to exit at once)", file=sys.stderr, flush=True)
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            with super().capture_signals():
                yield
                self._captured_signals.clear()

    return Uvicorn


def _Uvicorn(config, app_server):  # noqa: N802 -- a class made on demand (uvicorn is an optional import)
    return _uvicorn_server()(config, app_server)
