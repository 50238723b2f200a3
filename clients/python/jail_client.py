"""A client of `jail serve` (schema/openapi.yaml), with the standard library only.

    from jail_client import Client
    c = Client("/run/jail/jail.sock")           # or Client(url="https://host:8443", token=..., ssl_context=...)
    r = c.run(shell="echo hi; exit 3")          # the jail.result/v1 document, a dict
    s = c.create_session(id="a1")
    c.put_file("a1", "/workspace/main.py", b"print(6*7)\n")
    r = c.exec("a1", argv=["python3", "main.py"], on_output=lambda stream, data: print(stream, data))
    c.delete_session("a1")

Errors of the API raise JailError, with .code (stable: BAD_REQUEST, NOT_FOUND, ...),
.field and .status. A workload's exit status, timeout or OOM is in the result, never an error.
"""

import base64
import http.client
import json
import socket
import ssl
import urllib.parse

__all__ = ["Client", "JailError"]


class JailError(Exception):
    """An error answer of the server: {"error": {code, message, field, step, retryable}}."""

    def __init__(self, status, body):
        err = body.get("error", {}) if isinstance(body, dict) else {}
        self.status = status
        self.code = err.get("code", "")
        self.field = err.get("field", "")
        self.step = err.get("step", "")
        self.retryable = err.get("retryable", False)
        super().__init__("%s %s: %s" % (status, self.code, err.get("message", body)))


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("jail", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class Client:
    """A client of the server on the unix socket at path, or over TCP at url (https://HOST:PORT,
    or http:// on loopback) with a bearer token (jail serve token). Not safe for threads: one each."""

    def __init__(self, path="/run/jail/jail.sock", timeout=None, url=None, token=None, ssl_context=None):
        self._path = path
        self._timeout = timeout
        self._url = urllib.parse.urlsplit(url) if url else None
        self._token = token
        self._ssl = ssl_context

    def _connect(self):
        if self._url is None:
            return _UnixConnection(self._path, self._timeout)
        if self._url.scheme == "https":
            return http.client.HTTPSConnection(self._url.hostname, self._url.port or 443, timeout=self._timeout,
                                               context=self._ssl or ssl.create_default_context())
        return http.client.HTTPConnection(self._url.hostname, self._url.port or 80, timeout=self._timeout)

    def _request(self, method, path, body=None, content_type=None, accept=None):
        conn = self._connect()
        headers = {}
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        if content_type:
            headers["Content-Type"] = content_type
        if accept:
            headers["Accept"] = accept
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        if resp.status // 100 != 2:
            data = resp.read()
            conn.close()
            try:
                raise JailError(resp.status, json.loads(data))
            except ValueError:
                raise JailError(resp.status, data.decode("utf-8", "replace"))
        return conn, resp

    def _json(self, method, path, payload=None):
        body = None if payload is None else json.dumps(payload).encode()
        conn, resp = self._request(method, path, body, "application/json" if body is not None else None)
        try:
            data = resp.read()
            return json.loads(data) if data else None
        finally:
            conn.close()

    @staticmethod
    def _command(argv, shell, stdin, timeout, extra):
        req = dict(extra)
        if argv is not None:
            req["argv"] = list(argv)
        if shell is not None:
            req["shell"] = shell
        if isinstance(stdin, bytes):
            req["stdin_b64"] = base64.b64encode(stdin).decode()
        elif stdin is not None:
            req["stdin"] = stdin
        if timeout is not None:
            req["timeout"] = timeout
        return req

    def health(self):
        return self._json("GET", "/v1/health")

    def info(self):
        return self._json("GET", "/v1/info")

    def run(self, argv=None, shell=None, stdin=None, timeout=None, profile=None, spec=None, pool=None,
            env=None, cwd=None, limits=None, language=None, code=None):
        """Run one command in a new jail (or a warm pool's: result["pool"] says hit or miss);
        returns its result (a dict). env (["K=V"]) and cwd override the spec's; limits is a dict
        of memory_max_bytes, swap_max_bytes, pids_max, cpus, cpu_time, output_limit_bytes.
        language and code run code by a language runner (python, node, c, go, ...; argv: the
        program's arguments): a compile that fails is status compile_error."""
        extra = {}
        for k, v in (("profile", profile), ("spec", spec), ("pool", pool), ("env", env), ("cwd", cwd),
                     ("limits", limits), ("language", language), ("code", code)):
            if v is not None:
                extra[k] = v
        return self._json("POST", "/v1/run", self._command(argv, shell, stdin, timeout, extra))

    def create_session(self, id=None, labels=None, profile=None, spec=None, ttl=None, idle_timeout=None, pool=None,
                       workspace=None, from_snapshot=None):
        """Create a session (from a warm pool of sessions with pool=: the answer's "pool" says hit or miss).
        ttl and idle_timeout are Go durations ("10m") or seconds; workspace is {"type": "tmpfs",
        "size_bytes": N} (or dir, overlay, none); from_snapshot starts it from a snapshot of the tenant's."""
        req = {k: v for k, v in (("id", id), ("labels", labels), ("profile", profile), ("spec", spec),
                                 ("ttl", ttl), ("idle_timeout", idle_timeout), ("pool", pool),
                                 ("workspace", workspace), ("from", from_snapshot)) if v is not None}
        return self._json("POST", "/v1/sessions", req)

    def update_session(self, id, labels=None, env=None, cwd=None, ttl=None, idle_timeout=None):
        """Change a session: labels (replaced), its commands' default env and cwd, its TTL (from its
        start; 0: none) and idle timeout (from now; 0: none). Returns the session's document."""
        req = {k: v for k, v in (("labels", labels), ("env", env), ("cwd", cwd), ("ttl", ttl),
                                 ("idle_timeout", idle_timeout)) if v is not None}
        return self._json("PATCH", "/v1/sessions/" + urllib.parse.quote(id, safe=""), req)

    def sessions(self, **labels):
        q = urllib.parse.urlencode([("label", "%s=%s" % kv) for kv in labels.items()])
        return self._json("GET", "/v1/sessions?" + q)["sessions"]

    def session(self, id):
        return self._json("GET", "/v1/sessions/" + urllib.parse.quote(id, safe=""))

    def delete_session(self, id):
        return self._json("DELETE", "/v1/sessions/" + urllib.parse.quote(id, safe=""))

    def delete_sessions(self, labels=None, all=False):
        """Remove the tenant's sessions with every one of labels (a dict: any label name,
        "all" too), or every one of them with all=True (one or the other).
        Returns {"removed": [{"id", "killed"}], "failed": [...]}."""
        q = [("label", "%s=%s" % kv) for kv in (labels or {}).items()]
        if all:
            q.append(("all", "1"))
        return self._json("DELETE", "/v1/sessions?" + urllib.parse.urlencode(q))

    def _action(self, id, action, body=None):
        return self._json("POST", "/v1/sessions/%s:%s" % (urllib.parse.quote(id, safe=""), action), body)

    def pause(self, id):
        """Freeze every process of the session; its commands are refused until resume."""
        return self._action(id, "pause")

    def resume(self, id):
        return self._action(id, "resume")

    def touch(self, id):
        """Count as activity: the session's idle timeout starts again."""
        return self._action(id, "touch")

    def fork(self, id, n=1):
        """Snapshot the session and make n sessions from it: {"snapshot", "forks": [{"session"} or {"error"}]}."""
        return self._action(id, "fork", {"n": n})

    def restore(self, id, snapshot):
        """Kill the session's commands and bring its workspace back to a snapshot (id or name)."""
        return self._action(id, "restore", {"snapshot": snapshot})

    def snapshot(self, id, name=None):
        """Snapshot the session's workspace; returns the snapshot's document (its "id")."""
        return self._json("POST", "/v1/sessions/%s/snapshots" % urllib.parse.quote(id, safe=""),
                          {"name": name} if name else None)

    def snapshots(self):
        return self._json("GET", "/v1/snapshots")["snapshots"]

    def delete_snapshot(self, sid):
        return self._json("DELETE", "/v1/snapshots/" + urllib.parse.quote(sid, safe=""))

    def exec(self, id, argv=None, shell=None, stdin=None, timeout=None, env=None, cwd=None, on_output=None,
             background=False, stdin_open=False, limits=None, language=None, code=None, detach=False):
        """Run a command in session id; returns its result. With on_output(stream, data: bytes),
        the output is streamed to it as it comes (NDJSON events). With background=True it returns
        the exec's document at once (its "id" for follow, write_stdin and signal); stdin_open keeps
        its stdin open for write_stdin. limits: {"cpu_time", "output_limit_bytes"}, the command's
        own. language and code run code by a language runner (argv: the program's arguments);
        detach lets a streamed command run on if this client goes away."""
        extra = {k: v for k, v in (("env", env), ("cwd", cwd), ("limits", limits), ("language", language),
                                   ("code", code)) if v is not None}
        if detach:
            extra["detach"] = True
        if background:
            extra["background"] = True
        if stdin_open:
            extra["stdin_open"] = True
        req = json.dumps(self._command(argv, shell, stdin, timeout, extra)).encode()
        path = "/v1/sessions/%s/exec" % urllib.parse.quote(id, safe="")
        if on_output is None or background:
            conn, resp = self._request("POST", path, req, "application/json")
            try:
                return json.loads(resp.read())
            finally:
                conn.close()
        conn, resp = self._request("POST", path, req, "application/json", "application/x-ndjson")
        return self._events(conn, resp, 1, on_output)

    def _exec_path(self, id, eid):
        return "/v1/sessions/%s/exec/%s" % (urllib.parse.quote(id, safe=""), urllib.parse.quote(eid, safe=""))

    def exec_info(self, id, eid):
        """An exec's document: its state, and its result once it ended."""
        return self._json("GET", self._exec_path(id, eid))

    def follow(self, id, eid, from_seq=1, on_output=None):
        """Replay an exec's events from from_seq and follow it to its end; returns its result."""
        conn, resp = self._request("GET", self._exec_path(id, eid) + "/events?from=%d" % from_seq, accept="application/x-ndjson")
        return self._events(conn, resp, from_seq, on_output or (lambda stream, data: None))

    def write_stdin(self, id, eid, data, eof=False):
        """Write data (bytes) to an exec's open stdin; eof=True closes it after."""
        conn, resp = self._request("POST", self._exec_path(id, eid) + "/stdin" + ("?eof=1" if eof else ""), data,
                                   "application/octet-stream")
        try:
            return json.loads(resp.read())
        finally:
            conn.close()

    def signal(self, id, eid, sig):
        """Send a signal ("TERM", "SIGINT", ...) to an exec's process group."""
        return self._json("POST", self._exec_path(id, eid) + "/signal", {"signal": sig})

    def pools(self):
        return self._json("GET", "/v1/pools")["pools"]

    def _events(self, conn, resp, want, on_output):
        try:
            for line in resp:
                event = json.loads(line)
                kind = event.get("event")
                if kind == "keepalive":
                    continue
                if kind == "lost":
                    want = event["to"] + 1
                    continue
                if event.get("seq") != want:
                    raise JailError(resp.status, {"error": {"code": "INTERNAL", "message": "event %d came as %s" % (want, event.get("seq"))}})
                want += 1
                if kind in ("stdout", "stderr"):
                    data = event.get("data", "")
                    on_output(kind, base64.b64decode(data) if event.get("encoding") == "base64" else data.encode())
                elif kind == "exit":
                    return event["result"]
                elif kind == "error":
                    raise JailError(500, event)
            raise JailError(resp.status, {"error": {"code": "INTERNAL", "message": "the stream ended without its exit event"}})
        finally:
            conn.close()

    def _files(self, id, path):
        return "/v1/sessions/%s/files/%s" % (urllib.parse.quote(id, safe=""), urllib.parse.quote(path.lstrip("/")))

    def put_file(self, id, path, data, mode=None, mkdir=False):
        q = urllib.parse.urlencode([(k, v) for k, v in (("mode", mode), ("mkdir", "1" if mkdir else None)) if v is not None])
        conn, resp = self._request("PUT", self._files(id, path) + "?" + q, data, "application/octet-stream")
        try:
            return json.loads(resp.read())
        finally:
            conn.close()

    def get_file(self, id, path):
        conn, resp = self._request("GET", self._files(id, path))
        try:
            return resp.read()
        finally:
            conn.close()

    def list_dir(self, id, path, depth=1):
        return self._json("GET", self._files(id, path) + "?list&depth=%d" % depth)["files"]

    def delete_file(self, id, path, recursive=False):
        return self._json("DELETE", self._files(id, path) + ("?recursive=1" if recursive else ""))
