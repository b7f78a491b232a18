"""HTTP transport of the scheduler extender (kube-scheduler's extender protocol) on aiohttp's low-level server.

``ExtenderHTTP.handle`` is a plain function of (method, path, body) -> (status, body,
content type) so it can be fuzzed in-process; :class:`HTTPServer` serves it on an
asyncio loop (its own thread, or the caller's loop). Malformed, mistyped or oversized
requests get a 400 with the reason; nothing a client sends produces a 5xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.service import ExtenderService
from qosmos.extender.tls import ClientPolicy, peer_common_name

log = logging.getLogger("qosmos.extender.http")

MAX_BODY = 8 * 1024 * 1024
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
VERBS = ("filter", "prioritize", "bind")
GETS = ("healthz", "readyz", "metrics")


def _error(status: int, message: str) -> tuple[int, bytes, str]:
    return status, orjson.dumps({"Error": message}), JSON


class ExtenderHTTP:
    """Routes one request to the service; never raises."""

    def __init__(
        self,
        service: ExtenderService,
        ready: Callable[[], bool] | None = None,
        max_body: int = MAX_BODY,
        clients: ClientPolicy | None = None,
    ) -> None:
        self.service = service
        self.clients = clients or ClientPolicy()
        self.ready = ready or (lambda: service.cache.ready)
        self.max_body = max_body
        self._frags: dict[str, bytes] = {}
        self._rejected_window = (0.0, 0, 0)  # (window start, logged, suppressed)

    def _log_rejected(self, verb: str, status: int, message: str, caller: str) -> None:
        """Log a refused request: at most 20 lines per 10 s, then a count of the ones left out."""
        now = time.monotonic()
        start, logged, suppressed = self._rejected_window
        if now - start > 10.0:
            if suppressed:
                log.warning("%d more refused requests not logged", suppressed)
            start, logged, suppressed = now, 0, 0
        if logged < 20:
            log.warning(
                "refused %s request: %s",
                verb,
                message,
                extra={"verb": verb, "status": status, "caller": caller},
            )
            logged += 1
        else:
            suppressed += 1
        self._rejected_window = (start, logged, suppressed)

    def handle(self, method: str, path: str, body: bytes, caller: str = "") -> tuple[int, bytes, str]:
        """Answer one request: (status, payload, content type). ``caller`` identifies the client."""
        verb = path.rstrip("/").rsplit("/", 1)[-1]
        group = "scheduler" if verb in VERBS else "metrics" if verb == "metrics" else None
        if group is not None and not self.clients.allows(group, caller[3:] if caller.startswith("cn:") else None):
            # authenticated but not authorised for this route: a metrics or extender certificate is no scheduler
            self.service.metrics.forbidden.labels(f"/{verb}").inc()
            message = f"client {caller or 'unknown'} may not call /{verb} (--{group}-clients)"
            self._log_rejected(verb, 403, message, caller)
            return _error(403, message)
        if method == "GET":
            if verb == "healthz":
                return 200, b"ok", TEXT
            if verb == "readyz":
                return (200, b"ok", TEXT) if self.ready() else (503, b"cache not synced", TEXT)
            if verb == "metrics":
                self.service.metrics.observe_cache(self.service.cache.stats())
                return 200, generate_latest(self.service.metrics.registry), CONTENT_TYPE_LATEST
        if method != "POST":
            if verb in VERBS:
                return _error(405, f"/{verb} takes POST with a JSON body, not {method}")
            if verb in GETS:
                return _error(405, f"/{verb} takes GET, not {method}")
            return _error(404, f"no such endpoint {path!r}")
        if verb in GETS:
            return _error(405, f"/{verb} takes GET, not {method}")
        if verb not in VERBS:
            return _error(404, f"no such verb {verb!r}; expected one of {', '.join(VERBS)}")
        if len(body) > self.max_body:
            message = f"request body of {len(body)} bytes exceeds the limit of {self.max_body}"
            self._log_rejected(verb, 400, message, caller)
            return _error(400, message)
        start = time.perf_counter()
        try:
            try:
                args = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise InvalidInput("body", body[:64], f"not valid JSON: {exc}") from None
            if verb == "prioritize":
                payload = self._host_priorities(*self.service.prioritize_scores(args, caller))
            else:
                payload = orjson.dumps(getattr(self.service, verb)(args, caller))
            status = 200
        except InvalidInput as exc:
            self.service.metrics.decisions.labels(verb, "invalid").inc()
            self._log_rejected(verb, 400, str(exc), caller)
            status, payload, _ = _error(400, str(exc))
        except RecursionError:
            self._log_rejected(verb, 400, "request nested too deeply", caller)
            status, payload, _ = _error(400, "request nested too deeply")
        except Exception as exc:  # a bug: answer with the error (the scheduler may ignore us) and log it
            log.exception("extender %s failed", verb)
            self.service.metrics.decisions.labels(verb, "error").inc()
            status, payload, _ = 200, orjson.dumps(_failure(verb, f"internal error: {type(exc).__name__}: {exc}")), JSON
        self.service.metrics.latency.labels(verb).observe(time.perf_counter() - start)
        return status, payload, JSON

    def _host_priorities(self, names: list[str], scores: list[int]) -> bytes:
        """HostPriorityList JSON, from per-name fragments memoised across requests (C-level joins)."""
        frags = self._frags
        parts = list(map(frags.get, names))
        if None in parts:
            if len(frags) > 200_000:
                frags.clear()
            for n in names:
                if n not in frags:
                    frags[n] = b'{"Host":' + orjson.dumps(n) + b',"Score":'
            parts = list(map(frags.__getitem__, names))
        full = cast("list[bytes]", parts)  # no None left: every name has its fragment by now
        return b"[" + b",".join(map(bytes.__add__, full, map(_SCORES.__getitem__, scores))) + b"]"


_SCORES = [str(i).encode() + b"}" for i in range(11)]


def _failure(verb: str, message: str) -> Any:
    """A well-formed protocol answer carrying an error, for the rare internal failure."""
    if verb == "prioritize":
        return []
    return {"Error": message}


class HTTPServer:
    """Serves an ExtenderHTTP with aiohttp's low-level server; graceful stop finishes in-flight requests."""

    def __init__(
        self, http: ExtenderHTTP, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.http = http
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self._server: web.Server | None = None
        self._aserver: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    @staticmethod
    def caller(request: web.BaseRequest) -> str:
        """The client: its certificate's CN with TLS, else its address."""
        transport = request.transport
        if transport is None:
            return ""
        sslobj = transport.get_extra_info("ssl_object")
        name = peer_common_name(sslobj.getpeercert()) if sslobj is not None else None
        if name:
            return f"cn:{name}"
        peer = transport.get_extra_info("peername")
        return f"ip:{peer[0]}" if peer else ""

    async def _handler(self, request: web.BaseRequest) -> web.StreamResponse:
        caller = self.caller(request)
        if request.method == "POST":
            if request.content_length is not None and request.content_length > self.http.max_body:
                message = f"request body of {request.content_length} bytes exceeds the limit of {self.http.max_body}"
                self.http._log_rejected(request.path, 400, message, caller)
                status, payload, ctype = _error(400, message)
                return web.Response(
                    status=status, body=payload, content_type=ctype.split(";")[0], headers={"Connection": "close"}
                )
            chunks, size = [], 0
            try:
                async for chunk in request.content.iter_any():
                    size += len(chunk)
                    if size > self.http.max_body:
                        status, payload, _ = _error(
                            400, f"request body exceeds the limit of {self.http.max_body} bytes"
                        )
                        return web.Response(
                            status=status,
                            body=payload,
                            content_type="application/json",
                            headers={"Connection": "close"},
                        )
                    chunks.append(chunk)
            except Exception as exc:  # broken chunked encoding and the like
                status, payload, _ = _error(400, f"unreadable request body: {exc}")
                return web.Response(status=status, body=payload, content_type="application/json")
            body = b"".join(chunks)
        else:
            body = b""
        status, payload, ctype = self.http.handle(request.method, request.path, body, caller)
        headers = {"Content-Type": ctype}
        if status == 405:
            headers["Allow"] = "GET" if request.path.rstrip("/").rsplit("/", 1)[-1] in GETS else "POST"
        return web.Response(status=status, body=payload, headers=headers)

    async def start_async(self) -> None:
        """Start listening on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._server = web.Server(self._handler, access_log=None)
        try:
            self._aserver = await self._loop.create_server(
                self._server, self.host, self.port, backlog=1024, reuse_address=True, ssl=self.ssl_context
            )
        except OSError as exc:
            raise InvalidInput(
                "http_port", f"{self.host}:{self.port}", f"cannot listen there: {exc.strerror or exc}"
            ) from None
        self.port = self._aserver.sockets[0].getsockname()[1]
        log.info("extender HTTP listening", extra={"url": self.url, "tls": self.ssl_context is not None})

    async def stop_async(self, grace: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace`` seconds), close connections."""
        if self._aserver is not None:
            self._aserver.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._aserver.wait_closed(), 0.5)
        if self._server is not None:
            await self._server.shutdown(grace)
        self._aserver = self._server = None

    # ---- in a thread of its own (tests, benchmarks) ---------------------------------------
    def start_in_thread(self) -> HTTPServer:
        started = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:
                errors.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.stop_async())
            loop.close()

        self._thread = threading.Thread(target=run, name="qosmos-extender-http", daemon=True)
        self._thread.start()
        started.wait(10)
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        """Stop a server started with :meth:`start_in_thread`."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(15)
            self._thread = None
