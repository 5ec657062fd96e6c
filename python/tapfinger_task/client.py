"""A client for a tapfinger agent's HTTP API, named as the CLI's commands are: ``submit``,
``tasks``, ``show``, ``cancel``, ``logs`` (``follow``), ``node``, ``peers``.

    from tapfinger_task.client import Client
    c = Client("127.0.0.1:7601", token_file="/etc/tapfinger/api-token")
    tid = c.submit("train.toml")           # a TOML or JSON file, or a spec dict
    ended = c.follow(tid)                  # its output as it comes; the task as it ended
    c.cancel(tid)

Errors the API gives come back as :class:`ApiError` carrying its message, the spec field it
names (a refused submission says which) and, for a journal that cannot take the submission,
when to try again. Standard library only (TOML files need Python 3.11, or ``tomli``).
"""

import getpass
import http.client
import json
import os
import sys
import time
import urllib.parse

ENDED = ("succeeded", "failed", "cancelled")


class ApiError(Exception):
    """An answer other than success: the HTTP status, the API's message, the field it names
    (None where it names none) and the seconds to wait before trying again (``Retry-After``)."""

    def __init__(self, status, message, field=None, retry_after=None):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.field = field
        self.retry_after = retry_after


def _read_token(path):
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        # The same kind of error, saying which file it is and what it is for.
        raise type(e)(e.errno, f"cannot read the API token file ({e.strerror})", os.fspath(path)) from e
    if not token:
        raise ValueError(f"{path}: the token file is empty")
    return token


def _load_spec(path):
    with open(path, "rb") as f:
        raw = f.read()
    if str(path).endswith(".json"):
        return json.loads(raw)
    try:
        import tomllib  # noqa: PLC0415 (Python 3.11+)
    except ImportError:
        try:
            import tomli as tomllib  # noqa: PLC0415
        except ImportError as e:
            raise RuntimeError(
                f"{path}: reading TOML needs Python 3.11 or the `tomli` package; "
                "or give the spec as a dict or a .json file"
            ) from e
    return tomllib.loads(raw.decode())


class Client:
    """One agent's API (``host:port``; the agent's ``api_listen``), with its bearer token if
    the API asks for one (``token``, or ``token_file`` as the CLI's ``--token-file``)."""

    def __init__(self, api="127.0.0.1:7601", token=None, token_file=None, timeout=30.0):
        self.api = api
        self.token = _read_token(token_file) if token_file else token
        self.timeout = timeout

    def _call(self, method, path, body=None):
        host, _, port = self.api.rpartition(":")
        conn = http.client.HTTPConnection(host or self.api, int(port or 7601), timeout=self.timeout)
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            resp = conn.getresponse()
            text = resp.read().decode("utf-8", "replace")
        except OSError as e:
            raise ConnectionError(
                f"cannot reach the agent's API at {self.api} (is `tapfinger-agent run` running?): {e}"
            ) from e
        finally:
            conn.close()
        if 200 <= resp.status < 300:
            return json.loads(text) if text else None
        try:
            err = json.loads(text)
            message, field = err.get("error", text), err.get("field")
        except ValueError:
            message, field = text.strip(), None
        retry = resp.getheader("Retry-After")
        raise ApiError(resp.status, message, field, int(retry) if retry and retry.isdigit() else None)

    # Tasks.

    def submit(self, spec):
        """Submit a task: a spec dict, or a path to a TOML or JSON spec file. Returns its id.
        Where the spec names no ``submitter``, the login name is given (as ``tapfinger-agent
        submit`` does): the agent learns sizes per submitter and job."""
        if not isinstance(spec, dict):
            spec = _load_spec(os.fspath(spec))
        if not str(spec.get("submitter", "")).strip():
            try:
                spec = dict(spec, submitter=getpass.getuser())
            except (KeyError, OSError):
                pass
        return self._call("POST", "/v1/tasks", spec)["id"]

    def tasks(self, state=None, name=None, klass=None, box=None):
        """Every task the agent knows, oldest first, as the API lists them (all pages), kept to
        those in ``state`` (pending, running, gang, succeeded, failed, cancelled), of ``name``,
        of class ``klass``, on the box ``box``."""
        q = {k: v for k, v in (("state", state), ("name", name), ("class", klass), ("box", box)) if v}
        out, offset = [], 0
        while True:
            page = self._call("GET", "/v1/tasks?" + urllib.parse.urlencode(dict(q, offset=offset)))
            out.extend(page["tasks"])
            if page.get("next_offset") is None:
                return out
            offset = page["next_offset"]

    def resolve(self, task):
        """The id of ``task``: an id, or a name exactly one task has."""
        if isinstance(task, int):
            return task
        if task.isdigit():
            # An id the agent knows; else a name made of digits.
            try:
                self._call("GET", f"/v1/tasks/{int(task)}")
                return int(task)
            except ApiError as e:
                if e.status != 404:
                    raise
        found = self.tasks(name=task)
        if len(found) == 1:
            return found[0]["id"]
        if not found:
            raise LookupError(f"no task has the id or name {task!r}")
        ids = ", ".join(str(t["id"]) for t in found)
        raise LookupError(f"{len(found)} tasks are named {task!r}: {ids}; give an id")

    def show(self, task):
        """One task: its state, box, progress, metrics, and the agent's estimates of when it
        starts and finishes (``expected_start_s``, ``expected_finish_s``: seconds from now,
        absent where the agent cannot say)."""
        return self._call("GET", f"/v1/tasks/{self.resolve(task)}")

    def cancel(self, task):
        """Cancel an unfinished task (an ApiError with status 404 where there is none)."""
        return self._call("DELETE", f"/v1/tasks/{self.resolve(task)}")

    def logs(self, task, stdout_from=None, stderr_from=None):
        """What the task wrote (the last MiB of each, or from the byte offsets given), with
        each file's size, on the box that ran it last (the agent asks that box)."""
        q = {k: v for k, v in (("stdout_from", stdout_from), ("stderr_from", stderr_from)) if v is not None}
        path = f"/v1/tasks/{self.resolve(task)}/logs"
        return self._call("GET", path + ("?" + urllib.parse.urlencode(q) if q else ""))

    def follow(self, task, out=None, err=None, every=1.0):
        """Write what the task writes as it comes (stdout to ``out``, stderr to ``err``) until it
        has ended and all it wrote is written; returns the task as it ended (its ``state``:
        succeeded, failed or cancelled)."""
        out = out or sys.stdout
        err = err or sys.stderr
        tid = self.resolve(task)
        at_out = at_err = None
        while True:
            info = self.show(tid)
            ended = info["state"] in ENDED
            try:
                l = self.logs(tid, at_out, at_err)
                out.write(l["stdout"])
                err.write(l["stderr"])
                out.flush()
                err.flush()
                at_out, at_err = l["stdout_size"], l["stderr_size"]
            except ApiError as e:
                if e.status != 404:
                    raise
                if ended and at_out is None:
                    raise LookupError(
                        f"no logs of task {tid} (it ran on {info.get('box') or 'another box'}): "
                        f"{e.message}"
                    ) from e
            if ended:
                return info
            time.sleep(every)

    # The box.

    def node(self):
        """This box: its capacity, use, peers, policy, ..."""
        return self._call("GET", "/v1/node")

    def peers(self):
        """The peers this box hears."""
        return self._call("GET", "/v1/peers")
