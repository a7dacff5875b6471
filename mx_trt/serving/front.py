"""The HTTP front of a served model: checks each request before Triton sees it, and owns readiness and draining.

``tritonserver`` listens for HTTP on a private loopback port; :class:`HttpFront`
listens where the user asked (``--host``, ``--http-port``) and forwards every
request there over one upstream connection per client connection. On the way:

- an inference request for the model is read whole (up to
  :func:`~mx_trt.serving.admission.body_limit`, else 413 before the body is
  read; a gzip or deflate body is inflated to no more than that) and its JSON
  header checked by
  :func:`~mx_trt.serving.admission.check_request`; malformed JSON or a shape,
  datatype, batch or data size the model does not take gets a 400 with the
  reason, in the time it takes to parse the header, and Triton never sees it;
- ``/v2/health/ready`` and the model's ``ready`` answer 503 while the front is
  not ready (the model is loading or an instance is being restarted) or
  draining; other requests are forwarded;
- :meth:`HttpFront.drain` (on SIGTERM) turns readiness false at once, closes
  idle keep-alive connections, lets the requests in flight finish and closes
  their connections after their response, and answers new requests with 503.
  So Triton has no idle HTTP client left to wait for when it stops.

At most :data:`MAX_CONNECTIONS` client connections are served at once; more
are answered 503 and closed. Error bodies are Triton's: ``{"error": "..."}``.
"""
from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from mx_trt.serving.admission import InputRule, body_limit, check_request, parse_header

logger = logging.getLogger(__name__)

#: Client connections served at once.
MAX_CONNECTIONS = 512
#: Seconds an idle keep-alive connection is kept open.
IDLE_TIMEOUT_S = 75.0
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
               "transfer-encoding", "upgrade", "content-length", "host"}


class _Refused(Exception):
    """A request answered by the front itself: status, message, and whether the connection is closed after."""

    def __init__(self, status: int, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close or status == 413


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    front: "HttpFront"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the peer's delayed
        # ACK hold the second one for about 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.busy = False
        self.upstream: Optional[http.client.HTTPConnection] = None
        self.admitted = self.server.front._register(self)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self.upstream is not None:
                self.upstream.close()
            self.server.front._unregister(self)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        logger.debug("%s " + format, self.address_string(), *args)

    def handle_one_request(self) -> None:
        if not self.admitted:
            self.close_connection = True
            self.raw_requestline = self.rfile.readline(65537)
            if self.raw_requestline and self.parse_request():
                self._reply(503, "the server has too many connections; retry later", close=True)
            return
        super().handle_one_request()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def _serve(self) -> None:
        front = self.server.front
        front._begin(self)
        try:
            body = self._read_body(front.limit)
            front.admit(self.command, self.path, self.headers, body)
            status, headers, data = self._forward(body)
            self._send(status, headers, data)
        except _Refused as exc:
            self._reply(exc.status, exc.message, close=exc.close)
        finally:
            front._end(self)

    def _read_body(self, limit: int) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked(limit)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise _Refused(400, "bad Content-Length") from None
        if length < 0:
            raise _Refused(400, "bad Content-Length")
        if length > limit:
            raise _Refused(413, f"the request body ({length} bytes) is larger than this model can take ({limit})")
        body = self.rfile.read(length)
        if len(body) != length:
            raise _Refused(400, f"the request body ended after {len(body)} of {length} bytes", close=True)
        return body

    def _read_chunked(self, limit: int) -> bytes:
        parts: List[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024).split(b";")[0].strip()
            try:
                size = int(line, 16)
            except ValueError:
                raise _Refused(400, "bad chunked encoding") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            total += size
            if total > limit:
                raise _Refused(413, f"the request body is larger than this model can take ({limit} bytes)")
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _forward(self, body: bytes) -> Tuple[int, List[Tuple[str, str]], bytes]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        for attempt in (0, 1):
            if self.upstream is None:
                host, port = self.server.front.upstream
                self.upstream = http.client.HTTPConnection(host, port, timeout=None)
            try:
                if self.upstream.sock is None:
                    self.upstream.connect()
                    sock: Any = self.upstream.sock
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.upstream.request(self.command, self.path, body=body if body or self.command == "POST" else None,
                                      headers=headers)
                resp = self.upstream.getresponse()
                data = resp.read()
                return resp.status, [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP], data
            except (OSError, http.client.HTTPException) as exc:
                self.upstream.close()
                self.upstream = None
                if attempt:
                    raise _Refused(503, f"the inference server is not reachable ({type(exc).__name__}); retry "
                                        "later") from None
        raise AssertionError("unreachable")

    def _send(self, status: int, headers: Sequence[Tuple[str, str]], data: bytes, close: bool = False) -> None:
        close = close or self.server.front.draining
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _reply(self, status: int, message: str, close: bool = False) -> None:
        try:
            self._send(status, [("Content-Type", "application/json")],
                       json.dumps({"error": message}).encode(), close=close)
        except OSError:
            self.close_connection = True


class HttpFront:
    """The HTTP front of one model (see the module's docstring).

    Args:
        host / port: Where to listen (``port`` 0: a free one; :attr:`port` says which).
        upstream: Triton's own HTTP ``(host, port)``.
        model: The model's name.
        rules: Its inputs.
        max_batch: Its largest batch.

    Raises:
        OSError: the address cannot be bound (in use, or not an address of this machine).
    """

    def __init__(self, host: str, port: int, upstream: Tuple[str, int], model: str, rules: Sequence[InputRule],
                 max_batch: int) -> None:
        self.upstream = upstream
        self.model = model
        self.rules = list(rules)
        self.max_batch = int(max_batch)
        self.limit = body_limit(self.rules, self.max_batch)
        escaped = re.escape(model)
        self._infer = re.compile(rf"/v2/models/{escaped}(/versions/[^/]+)?/infer/?(\?.*)?")
        self._ready_paths = re.compile(rf"/v2/health/ready/?(\?.*)?|/v2/models/{escaped}(/versions/[^/]+)?/ready/?"
                                       rf"(\?.*)?")
        self.ready = False
        self.draining = False
        self.why_not_ready = "the model is loading"
        self._lock = threading.Lock()
        self._connections: Set[_Handler] = set()
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)
        self._server = _Server((host, port), _Handler)
        self._server.front = self
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"mx_trt-http-front-{self.port}", daemon=True)

    def start(self) -> None:
        """Start answering (in a thread of this process)."""
        self._thread.start()
        logger.debug("HTTP front on port %d, body limit %d bytes", self.port, self.limit)

    def set_ready(self, ready: bool, why: str = "") -> None:
        """Say whether readiness answers 200 (``why``: the reason given while it does not)."""
        with self._lock:
            self.ready = ready
            self.why_not_ready = why

    def admit(self, method: str, path: str, headers: Any, body: bytes) -> None:
        """Refuse (raise :class:`_Refused`) what must not reach Triton: see the module's docstring."""
        path_only = path.split("?", 1)[0]
        if self._ready_paths.fullmatch(path) and (self.draining or not self.ready):
            raise _Refused(503, "the server is shutting down" if self.draining else f"not ready: {self.why_not_ready}")
        if self.draining and not path_only.startswith("/v2/health/"):
            raise _Refused(503, "the server is shutting down")
        if method != "POST" or not self._infer.fullmatch(path):
            return
        if not self.ready:
            raise _Refused(503, f"not ready: {self.why_not_ready}")
        head = self._decoded(headers.get("Content-Encoding", ""), body)
        if headers.get("Inference-Header-Content-Length") is not None:
            try:
                n = int(headers["Inference-Header-Content-Length"])
            except ValueError:
                raise _Refused(400, "bad Inference-Header-Content-Length") from None
            if not 0 <= n <= len(head):
                raise _Refused(400, f"Inference-Header-Content-Length {n} is outside the body ({len(head)} bytes)")
            head = head[:n]
        doc, problem = parse_header(head)
        if doc is not None:
            problem = check_request(doc, self.rules, self.max_batch)
        if problem is not None:
            raise _Refused(400, problem)

    def _decoded(self, encoding: str, body: bytes) -> bytes:
        """The body as Triton will read it: ``gzip`` and ``deflate`` undone, to no more than the body limit."""
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            return body
        if encoding not in ("gzip", "deflate"):
            raise _Refused(400, f"Content-Encoding {encoding!r}: send gzip, deflate or none")
        try:
            inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
            data = inflater.decompress(body, self.limit + 1)
        except zlib.error as exc:
            raise _Refused(400, f"the {encoding} body does not decompress: {exc}") from None
        if len(data) > self.limit or inflater.unconsumed_tail:
            raise _Refused(413, f"the decompressed request is larger than this model can take ({self.limit} bytes)")
        return data

    def _register(self, handler: _Handler) -> bool:
        with self._lock:
            if len(self._connections) >= MAX_CONNECTIONS:
                return False
            self._connections.add(handler)
            return True

    def _unregister(self, handler: _Handler) -> None:
        with self._lock:
            self._connections.discard(handler)
            self._idle.notify_all()

    def _begin(self, handler: _Handler) -> None:
        with self._lock:
            handler.busy = True
            self._in_flight += 1

    def _end(self, handler: _Handler) -> None:
        with self._lock:
            handler.busy = False
            self._in_flight -= 1
            if self.draining:
                handler.close_connection = True
            self._idle.notify_all()

    def refuse_now(self) -> None:
        """Readiness false and new requests refused from now on; takes no lock (safe in a signal handler)."""
        self.draining = True
        self.ready = False

    def drain(self) -> None:
        """Readiness false now; idle connections closed; requests in flight finish, then their connections close."""
        with self._lock:
            self.draining = True
            self.ready = False
            idle = [h for h in self._connections if not h.busy]
        for h in idle:
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        logger.info("HTTP front draining: %d idle connection(s) closed, %d request(s) in flight", len(idle),
                    self._in_flight)

    def wait_closed(self, timeout_s: float) -> bool:
        """After :meth:`drain`: wait until every connection left is serving a request (the idle ones are closed,
        and with them their connections to Triton); ``False`` if some idle one is still open after ``timeout_s``."""
        with self._lock:
            return self._idle.wait_for(lambda: all(h.busy for h in self._connections), timeout=timeout_s)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request is in flight; ``False`` if some still are after ``timeout_s``."""
        with self._lock:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    def close(self) -> None:
        """Stop listening and close every connection."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        with self._lock:
            handlers = list(self._connections)
        for h in handlers:
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def describe(self) -> Dict[str, Any]:
        """State for logs and tests: readiness, draining, connections and requests in flight."""
        with self._lock:
            return {"ready": self.ready, "draining": self.draining, "connections": len(self._connections),
                    "in_flight": self._in_flight}
