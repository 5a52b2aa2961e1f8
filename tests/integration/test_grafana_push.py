"""``testbed dashboards push`` against a local HTTP server that plays Grafana's HTTP API and records every
call: folder lookup and creation, one POST /api/dashboards/db per dashboard with overwrite, the bearer
token on every request."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from testbed.monitoring import dashboards

TOKEN = "glsa_test_token_123"


class _FakeGrafana(BaseHTTPRequestHandler):
    calls: list[dict]
    folders: list[dict]

    def log_message(self, *args) -> None:
        pass

    def _answer(self, code: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        call = {
            "method": self.command,
            "path": self.path,
            "auth": self.headers.get("Authorization"),
            "body": body,
        }
        self.calls.append(call)
        return call

    def do_GET(self) -> None:
        call = self._record()
        if call["auth"] != f"Bearer {TOKEN}":
            return self._answer(401, {"message": "invalid API key"})
        if call["path"].startswith("/api/folders"):
            return self._answer(200, self.folders)
        self._answer(404, {"message": "not found"})

    def do_POST(self) -> None:
        call = self._record()
        if call["auth"] != f"Bearer {TOKEN}":
            return self._answer(401, {"message": "invalid API key"})
        if call["path"] == "/api/folders":
            folder = {"id": 7, "uid": call["body"].get("uid") or "generated", "title": call["body"]["title"]}
            self.folders.append(folder)
            return self._answer(200, folder)
        if call["path"] == "/api/dashboards/db":
            uid = call["body"]["dashboard"]["uid"]
            return self._answer(
                200, {"id": 1, "uid": uid, "url": f"/d/{uid}/x", "status": "success", "version": 1}
            )
        self._answer(404, {"message": "not found"})


@pytest.fixture
def grafana():
    handler = type("Handler", (_FakeGrafana,), {"calls": [], "folders": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_port}", handler
    server.shutdown()
    server.server_close()


def _push(url: str, token: str = TOKEN, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", "dashboards", "push", "--url", url, "--token", token, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_push_creates_the_folder_once_and_overwrites_every_dashboard(grafana):
    url, h = grafana
    p = _push(url)
    assert p.returncode == 0, p.stdout + p.stderr
    built = dashboards.build_all()
    assert all(c["auth"] == f"Bearer {TOKEN}" for c in h.calls)
    assert [(c["method"], c["path"]) for c in h.calls[:2]] == [
        ("GET", "/api/folders"),
        ("POST", "/api/folders"),
    ]
    assert h.calls[1]["body"] == {"title": "testbed", "uid": "testbed"}
    posts = [c for c in h.calls if c["path"] == "/api/dashboards/db"]
    assert len(posts) == len(built) == len(h.calls) - 2
    for c, d in zip(posts, built.values(), strict=True):
        assert c["method"] == "POST" and c["body"]["overwrite"] is True
        assert c["body"]["folderUid"] == "testbed"
        assert c["body"]["dashboard"] == {**d, "id": None}  # exactly the generated dashboard
    assert p.stdout.count("success: ") == len(built) and f"{url}/d/testbed-overview/x" in p.stdout

    # Second push: the folder is found, not created again; dashboards are overwritten in place.
    h.calls.clear()
    p = _push(url)
    assert p.returncode == 0, p.stdout + p.stderr
    assert [c["path"] for c in h.calls].count("/api/folders") == 1 and h.calls[0]["method"] == "GET"
    assert len([c for c in h.calls if c["path"] == "/api/dashboards/db"]) == len(built)


def test_push_into_another_folder_and_a_bad_token_fails_with_one_line(grafana):
    url, h = grafana
    p = _push(url, TOKEN, "--folder", "Scheduling")
    assert p.returncode == 0, p.stdout + p.stderr
    assert h.calls[1]["body"] == {"title": "Scheduling"}  # Grafana picks the uid
    assert all(c["body"]["folderUid"] == "generated" for c in h.calls if c["path"] == "/api/dashboards/db")
    h.calls.clear()
    p = _push(url, "wrong")
    assert p.returncode == 1
    assert "error: dashboards push" in p.stderr and "Unauthorized" in p.stderr, p.stderr
    assert [c["path"] for c in h.calls] == ["/api/folders"]  # stopped at the first refusal
