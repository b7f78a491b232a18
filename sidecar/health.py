"""One HTTP port for the node agent: ``/metrics`` (Prometheus), ``/healthz`` (liveness) and ``/readyz``."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def serve(
    address: str,
    port: int,
    registry: CollectorRegistry,
    healthy: Callable[[], bool],
    ready: Callable[[], bool],
) -> http.server.ThreadingHTTPServer:
    """Start the server on a daemon thread; returns it (``server_address`` has the bound port)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok = (healthy if path == "/healthz" else ready)()
                self._send(200 if ok else 503, b"ok\n" if ok else b"not ok\n", "text/plain")
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:  # probes every few seconds: not worth a log line
            return None

    srv = http.server.ThreadingHTTPServer((address, port), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, name="health", daemon=True).start()
    return srv
