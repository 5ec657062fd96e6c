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
from typing import IO, Any, Dict, List, Mapping, Optional, Union

# A task's or the box's record as the API gives it (JSON).
Record = Dict[str, Any]

ENDED = ("succeeded", "failed", "cancelled")


class ApiError(Exception):
    """An answer other than success: the HTTP status, the API's message, the field it names
    (None where it names none) and the seconds to wait before trying again (``Retry-After``)."""

    def __init__(
        self,
        status: int,
        message: str,
        field: Optional[str] = None,
        retry_after: Optional[int] = None,
    ) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.field = field
        self.retry_after = retry_after


def _read_token(path: Union[str, "os.PathLike[str]"]) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        # The same kind of error, saying which file it is and what it is for.
        raise type(e)(e.errno, f"cannot read the API token file ({e.strerror})", os.fspath(path)) from e
    if not token:
        raise ValueError(f"{path}: the token file is empty")
    return token


def _load_spec(path: str) -> Record:
    with open(path, "rb") as f:
        raw = f.read()
    if str(path).endswith(".json"):
        spec: Record = json.loads(raw)
        return spec
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415 (Python 3.11+)
    except ImportError:
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]  # noqa: PLC0415
        except ImportError as e:
            raise RuntimeError(
                f"{path}: reading TOML needs Python 3.11 or the `tomli` package; "
                "or give the spec as a dict or a .json file"
            ) from e
    loaded: Record = tomllib.loads(raw.decode())
    return loaded


class Client:
    """One agent's API (``host:port``; the agent's ``api_listen``), with its bearer token if
    the API asks for one (``token``, or ``token_file`` as the CLI's ``--token-file``)."""

    def __init__(
        self,
        api: str = "127.0.0.1:7601",
        token: Optional[str] = None,
        token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        timeout: float = 30.0,
    ) -> None:
        self.api = api
        self.token = _read_token(token_file) if token_file else token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None) -> Any:
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

    def submit(self, spec: Union[Mapping[str, Any], str, "os.PathLike[str]"]) -> int:
        """Submit a task: a spec dict, or a path to a TOML or JSON spec file. Returns its id.
        Where the spec names no ``submitter``, the login name is given (as ``tapfinger-agent
        submit`` does): the agent learns sizes per submitter and job."""
        body: Record = dict(spec) if isinstance(spec, Mapping) else _load_spec(os.fspath(spec))
        if not str(body.get("submitter", "")).strip():
            try:
                body = dict(body, submitter=getpass.getuser())
            except (KeyError, OSError):
                pass
        return int(self._call("POST", "/v1/tasks", body)["id"])

    def tasks(
        self,
        state: Optional[str] = None,
        name: Optional[str] = None,
        klass: Optional[Union[str, int]] = None,
        box: Optional[str] = None,
    ) -> List[Record]:
        """Every task the agent knows, oldest first, as the API lists them (all pages), kept to
        those in ``state`` (pending, running, gang, succeeded, failed, cancelled), of ``name``,
        of class ``klass``, on the box ``box``."""
        q = {k: v for k, v in (("state", state), ("name", name), ("class", klass), ("box", box)) if v}
        out: List[Record] = []
        offset = 0
        while True:
            page = self._call("GET", "/v1/tasks?" + urllib.parse.urlencode(dict(q, offset=offset)))
            out.extend(page["tasks"])
            if page.get("next_offset") is None:
                return out
            offset = page["next_offset"]

    def resolve(self, task: Union[int, str]) -> int:
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
            return int(found[0]["id"])
        if not found:
            raise LookupError(f"no task has the id or name {task!r}")
        ids = ", ".join(str(t["id"]) for t in found)
        raise LookupError(f"{len(found)} tasks are named {task!r}: {ids}; give an id")

    def show(self, task: Union[int, str]) -> Record:
        """One task: its state, box, progress, metrics, and the agent's estimates of when it
        starts and finishes (``expected_start_s``, ``expected_finish_s``: seconds from now,
        absent where the agent cannot say)."""
        info: Record = self._call("GET", f"/v1/tasks/{self.resolve(task)}")
        return info

    def cancel(self, task: Union[int, str]) -> Any:
        """Cancel an unfinished task (an ApiError with status 404 where there is none)."""
        return self._call("DELETE", f"/v1/tasks/{self.resolve(task)}")

    def logs(
        self,
        task: Union[int, str],
        stdout_from: Optional[int] = None,
        stderr_from: Optional[int] = None,
    ) -> Record:
        """What the task wrote (the last MiB of each, or from the byte offsets given), with
        each file's size, on the box that ran it last (the agent asks that box)."""
        q = {k: v for k, v in (("stdout_from", stdout_from), ("stderr_from", stderr_from)) if v is not None}
        path = f"/v1/tasks/{self.resolve(task)}/logs"
        logs: Record = self._call("GET", path + ("?" + urllib.parse.urlencode(q) if q else ""))
        return logs

    def follow(
        self,
        task: Union[int, str],
        out: Optional[IO[str]] = None,
        err: Optional[IO[str]] = None,
        every: float = 1.0,
    ) -> Record:
        """Write what the task writes as it comes (stdout to ``out``, stderr to ``err``) until it
        has ended and all it wrote is written; returns the task as it ended (its ``state``:
        succeeded, failed or cancelled)."""
        to_out = out or sys.stdout
        to_err = err or sys.stderr
        tid = self.resolve(task)
        at_out: Optional[int] = None
        at_err: Optional[int] = None
        while True:
            info = self.show(tid)
            ended = info["state"] in ENDED
            try:
                l = self.logs(tid, at_out, at_err)
                to_out.write(l["stdout"])
                to_err.write(l["stderr"])
                to_out.flush()
                to_err.flush()
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

    def node(self) -> Record:
        """This box: its capacity, use, peers, policy, ..."""
        node: Record = self._call("GET", "/v1/node")
        return node

    def peers(self) -> Any:
        """The peers this box hears."""
        return self._call("GET", "/v1/peers")
