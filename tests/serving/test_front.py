"""The HTTP front against a fake upstream (no Triton): forwarding, refusals, readiness, draining."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mx_trt.serving.admission import InputRule
from mx_trt.serving.front import HttpFront


class _Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list = []

    def log_message(self, *args):
        pass

    def _answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen.append((self.command, self.path, body))
        if b"slow" in body:
            time.sleep(1.0)
        data = json.dumps({"path": self.path, "bytes": len(body)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer


@pytest.fixture()
def front():
    _Upstream.seen = []
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    f = HttpFront("127.0.0.1", 0, ("127.0.0.1", upstream.server_address[1]), "m",
                  [InputRule.of("x", "float32", (2,))], 4)
    f.start()
    f.set_ready(True)
    yield f
    f.close()
    upstream.shutdown()
    upstream.server_close()


def _body(shape, n, extra=""):
    return json.dumps({"inputs": [{"name": "x", "shape": shape, "datatype": "FP32", "data": [0.5] * n}],
                       "id": extra}).encode()


def _post(conn, path, body):
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read() or b"{}"), resp.getheader("Connection")


def test_a_valid_request_is_forwarded_and_a_bad_one_never_reaches_the_server(front):
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    status, doc, _ = _post(conn, "/v2/models/m/infer", _body([2, 2], 4))
    assert status == 200 and doc == {"path": "/v2/models/m/infer", "bytes": len(_body([2, 2], 4))}
    for body, words in ((_body([1, 2 * 10**12], 4), "has shape"), (b'{"inputs": [', "malformed JSON"),
                        (_body([9, 2], 18), "batch size 9")):
        status, doc, _ = _post(conn, "/v2/models/m/versions/1/infer", body)
        assert status == 400 and words in doc["error"], doc
    assert len(_Upstream.seen) == 1
    # Other models and other paths go through unchecked: Triton answers them.
    assert _post(conn, "/v2/models/other/infer", b"{")[0] == 200
    conn.request("GET", "/v2/models/m/config")
    assert conn.getresponse().read() and len(_Upstream.seen) == 3
    conn.close()


def test_readiness_and_inference_answer_503_while_not_ready(front):
    front.set_ready(False, "a model instance died and is being restarted")
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    for path in ("/v2/health/ready", "/v2/models/m/ready", "/v2/models/m/versions/1/ready"):
        conn.request("GET", path)
        resp = conn.getresponse()
        assert resp.status == 503 and b"restarted" in resp.read()
    assert _post(conn, "/v2/models/m/infer", _body([1, 2], 2))[0] == 503
    conn.request("GET", "/v2/health/live")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read()
    front.set_ready(True)
    conn.request("GET", "/v2/health/ready")
    assert conn.getresponse().status == 200
    conn.close()


def test_drain_closes_idle_connections_and_lets_requests_in_flight_finish(front):
    idle = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    assert _post(idle, "/v2/models/m/infer", _body([1, 2], 2))[0] == 200
    busy = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    result = {}

    def slow():
        result["r"] = _post(busy, "/v2/models/m/infer", _body([1, 2], 2, extra="slow"))

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.3)
    front.drain()
    assert idle.sock.recv(1) == b""  # closed by the front
    t.join(10)
    status, _, connection = result["r"]
    assert status == 200 and connection == "close"
    assert front.wait_idle(1.0)
    fresh = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    fresh.request("GET", "/v2/health/ready")
    assert fresh.getresponse().status == 503
    fresh.close()
    busy.close()


def test_a_body_over_the_limit_is_refused_before_it_is_read(front):
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as s:
        s.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n")
        reply = b""
        while True:  # read to the end: the front closes the connection
            part = s.recv(4096)
            if not part:
                break
            reply += part
        assert reply.startswith(b"HTTP/1.1 413") and b"larger than this model can take" in reply
    assert _Upstream.seen == []


def test_a_chunked_body_is_read_checked_and_forwarded(front):
    body = _body([1, 2], 2)
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as s:
        s.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    assert _Upstream.seen[0][2] == body


def test_an_unreachable_server_gives_503(front):
    front.upstream = ("127.0.0.1", 1)
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    status, doc, _ = _post(conn, "/v2/models/m/infer", _body([1, 2], 2))
    assert status == 503 and "not reachable" in doc["error"]
    conn.close()


def test_a_compressed_body_is_checked_as_triton_will_read_it(front):
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)

    def send(body, encoding):
        conn.request("POST", "/v2/models/m/infer", body=body, headers={"Content-Encoding": encoding})
        resp = conn.getresponse()
        return resp.status, resp.read()

    good = _body([1, 2], 2)
    assert send(zlib.compress(good), "deflate")[0] == 200
    gz = zlib.compressobj(wbits=31)
    status, text = send(gz.compress(_body([1, 2 * 10**12], 4)) + gz.flush(), "gzip")
    assert status == 400 and b"has shape" in text
    bomb = zlib.compress(b" " * (front.limit + 10))  # a small body that inflates past the limit
    assert send(bomb, "deflate")[0] == 413
    assert send(b"not deflate", "deflate")[0] == 400
    assert send(good, "br")[0] == 400
    assert len(_Upstream.seen) == 1
    conn.close()
