"""Exercises jail_client against a real `jail serve`: on its unix socket (argv: PATH), or over TCP
with a bearer token (argv: URL TOKEN [CAFILE], TLS checked against CAFILE); run by
integration/clients_test.go. Exits non-zero, saying why, on the first failure."""

import ssl
import sys

from jail_client import Client, JailError

if len(sys.argv) > 2:
    ctx = ssl.create_default_context(cafile=sys.argv[3]) if len(sys.argv) > 3 else None
    c = Client(url=sys.argv[1], token=sys.argv[2], ssl_context=ctx)
else:
    c = Client(sys.argv[1])
assert c.health() == {"status": "ok"}

r = c.run(shell="read x; echo got $x; exit 3", stdin="hi\n")
assert r["status"] == "exited" and r["exit_code"] == 3 and r["stdout"] == "got hi\n", r
r = c.run(argv=["cat"], stdin=b"\xff\x00bytes")
assert r["stdout_encoding"] == "base64", r
r = c.run(shell="echo $GREET in $PWD", env=["GREET=hi"], cwd="/", limits={"pids_max": 16, "output_limit_bytes": 4096})
assert r["stdout"] == "hi in /\n", r

try:
    c.run(argv=["id"], spec={"memory_max_bytes": "lots"})
    raise AssertionError("a string memory limit was taken")
except JailError as e:
    assert e.status == 400 and e.code == "BAD_REQUEST" and e.field == "spec.memory_max_bytes", e

s = c.create_session(id="py1", labels={"from": "python"})
assert s["id"] == "py1" and s["state"] == "running", s
try:
    c.create_session(id="py1")
    raise AssertionError("a second py1 was made")
except JailError as e:
    assert e.code == "ALREADY_EXISTS", e
assert [x["id"] for x in c.sessions(**{"from": "python"})] == ["py1"]
s = c.update_session("py1", labels={"from": "python", "v": "2"}, ttl="1h", idle_timeout=600)
assert s["labels"] == {"from": "python", "v": "2"} and s["ttl_ms"] == 3600000 and s["idle_timeout_ms"] == 600000, s

c.put_file("py1", "/workspace/app/main.sh", b"#!/bin/sh\necho main $1\necho err >&2\n", mode="0755", mkdir=True)
assert c.get_file("py1", "/workspace/app/main.sh").startswith(b"#!/bin/sh")
assert [f["name"] for f in c.list_dir("py1", "/workspace/app")] == ["main.sh"]

got = []
r = c.exec("py1", argv=["/workspace/app/main.sh", "x"], on_output=lambda stream, data: got.append((stream, data)))
assert r["exit_code"] == 0 and r["session_id"] == "py1", r
assert b"".join(d for s, d in got if s == "stdout") == b"main x\n", got
assert b"".join(d for s, d in got if s == "stderr") == b"err\n", got
r = c.exec("py1", shell="echo $A; pwd", env=["A=1"], cwd="/workspace/app")
assert r["stdout"] == "1\n/workspace/app\n", r

x = c.exec("py1", shell="read a; echo got $a", background=True, stdin_open=True)
assert x["state"] == "running" and x["stdin_open"], x
assert c.write_stdin("py1", x["id"], b"bg\n", eof=True) == {"bytes": 3, "eof": True}
got = []
r = c.follow("py1", x["id"], on_output=lambda stream, data: got.append(data))
assert r["stdout"] == "got bg\n" and b"".join(got) == b"got bg\n", (r, got)
x = c.exec("py1", argv=["sleep", "30"], background=True)
c.signal("py1", x["id"], "TERM")
assert c.follow("py1", x["id"])["status"] == "signaled"
assert c.exec_info("py1", x["id"])["state"] == "exited"

c.delete_file("py1", "/workspace/app", recursive=True)
try:
    c.get_file("py1", "/workspace/app/main.sh")
    raise AssertionError("a removed file was read")
except JailError as e:
    assert e.status == 404, e

# A command's own limits; code by a language runner.
r = c.exec("py1", shell="head -c 1000 /dev/zero | tr '\\0' a", limits={"output_limit_bytes": 100})
assert r["stdout_bytes"] == 1000 and r["stdout_truncated"], r
r = c.exec("py1", language="sh", code="echo from code $1", argv=["x"])
assert r["stdout"] == "from code x\n" and r["language"] == "sh", r
r = c.run(language="python", code="print(6 * 7)")
assert r["stdout"] == "42\n", r

# Snapshots, restore, fork, pause.
c.put_file("py1", "/workspace/state.txt", b"one\n")
snap = c.snapshot("py1", name="py-one")
assert any(x["id"] == snap["id"] for x in c.snapshots()), snap
c.put_file("py1", "/workspace/state.txt", b"two\n")
s = c.restore("py1", "py-one")
assert s["id"] == "py1", s
assert c.get_file("py1", "/workspace/state.txt") == b"one\n"
f = c.fork("py1", n=1)
forked = f["forks"][0]["session"]["id"]
assert c.get_file(forked, "/workspace/state.txt") == b"one\n", f
assert c.pause("py1")["state"] == "paused"
assert c.resume("py1")["state"] == "running"
assert c.touch("py1")["id"] == "py1"

# Removing: by label, then all of the tenant's.
c.create_session(id="py2", labels={"from": "python"})
gone = c.delete_sessions({"from": "python"})
assert sorted(x["id"] for x in gone["removed"]) == sorted(["py1", "py2", forked]) and gone["failed"] == [], gone  # a fork keeps the labels
try:
    c.delete_sessions()
    raise AssertionError("a DELETE without all or labels was taken")
except JailError as e:
    assert e.status == 400 and e.field == "all", e
c.create_session(id="py3")
c.create_session(id="py4", labels={"all": "no"})  # a label may be called "all"
gone = c.delete_sessions({"all": "no"})
assert [x["id"] for x in gone["removed"]] == ["py4"], gone
gone = c.delete_sessions(all=True)
assert [x["id"] for x in gone["removed"]] == ["py3"], gone
c.delete_snapshot(snap["id"])
try:
    c.session("py1")
    raise AssertionError("a removed session was found")
except JailError as e:
    assert e.code == "NOT_FOUND", e
print("ok")
