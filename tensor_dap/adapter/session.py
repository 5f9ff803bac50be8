"""One debug session: the editor (client) on one side, debugpy's adapter (server) on the other.

Every message passes through; a handler named after it may change it on the way:
``<command>_request`` for client requests, ``<command>_response`` and ``<event>_event`` for
what the server sends. Messages to the client are renumbered (``seq``) because the proxy sends
some of its own; requests keep the client's numbers so responses match without bookkeeping.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import socket
import subprocess
import sys
import threading
from typing import Any, BinaryIO, Optional

import tensor_dap
from tensor_dap.adapter.agent_channel import AgentChannel
from tensor_dap.adapter.interpreter import interpreter_command, missing_agent, split_args
from tensor_dap.adapter.messaging import MalformedMessage, Writer, read_message
from tensor_dap.agent.channel import find_agent
from tensor_dap.agent.ranks import BadRanksError, ranks_spec
from tensor_dap.agent.rules import RULE_IDS, UnknownRuleError, all_rules, parse_rules

log = logging.getLogger("tensor_dap.adapter")

_PACKAGE_DIR = os.path.dirname(os.path.abspath(tensor_dap.__file__))
_STOP_PREFIX = re.compile(r"^\[([a-z-]+)\] (.*)$", re.DOTALL)
_BREAKPOINT_CLASS = "TensorBreakpoint"
_BREAKPOINT_MODULE = "tensor_dap.agent.suspend"
_TENSOR_VALUE = "tensor<"
"""How the renderers begin a tensor's value line (tensor_dap.render.tensor.value_line)."""


class ProxySession:
    def __init__(self, client_in: BinaryIO, client_out: BinaryIO, python: str = sys.executable):
        self.client_in = client_in
        self.client = Writer(client_out)
        self.python = python
        self.channel = AgentChannel()
        self.rules: list[str] = []
        self._seq = itertools.count(1)
        self._seq_lock = threading.Lock()
        #: our seq of a reverse request sent to the client -> debugpy's seq for it
        self._reverse: dict[int, int] = {}
        self._pending_filters: dict[int, list[str]] = {}
        self._terminated = False
        self.server_process = subprocess.Popen(
            [python, "-m", "debugpy.adapter"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.server = Writer(self.server_process.stdin)  # type: ignore[arg-type]
        #: attach to ``tensor-dap run``: the socket of the adapter ``debugpy.listen`` started
        self.remote: Optional[socket.socket] = None
        self._initialize: Optional[dict[str, Any]] = None
        self._swallow: set[int] = set()

    # -- pumps -----------------------------------------------------------------------------
    def run(self) -> int:
        self._reader = threading.Thread(
            target=self._pump_server,
            args=(self.server_process.stdout, self.server_process),
            name="tensor-dap-server",
            daemon=True,
        )
        self._reader.start()
        self._pump_client()
        self._shutdown()
        self._reader.join(timeout=5)
        return 0

    def _server_gone(self) -> bool:
        if self.remote is not None:
            return self.server.closed
        return self.server_process.poll() is not None

    def _pump_client(self) -> None:
        while True:
            try:
                message = read_message(self.client_in)
            except MalformedMessage as error:
                self._tell_client_malformed(error)
                continue
            except (OSError, ValueError):
                return
            if message is None:
                return
            if self._server_gone():
                self._refuse(message, "the debug session has ended")
                continue
            try:
                self._from_client(message)
            except Exception as error:  # a bug here must not end the session
                log.exception("tensor-dap: handling %s failed", message.get("command"))
                self._refuse(message, f"tensor-dap: {error}")

    def _pump_server(self, stream: BinaryIO, source: object) -> None:
        while True:
            try:
                message = read_message(stream)  # type: ignore[arg-type]
            except MalformedMessage:
                continue
            except (OSError, ValueError):
                break
            if message is None:
                break
            if source is not self._source():
                continue  # the local debugpy adapter, replaced by a remote one (attach)
            try:
                self._from_server(message)
            except Exception:
                log.exception("tensor-dap: handling a debugpy message failed")
                self.to_client(message)
        if source is not self._source():
            return
        if not self._terminated:
            self._terminated = True
            self.to_client({"type": "event", "event": "terminated", "body": {}})
        self.client.closed = True
        with contextlib.suppress(OSError):
            self.client_in.close()

    def _from_client(self, message: dict[str, Any]) -> None:
        if message.get("type") == "response":
            # the client answers a reverse request under the number we gave it: give debugpy back
            # the number it used
            with self._seq_lock:
                original = self._reverse.pop(message.get("request_seq", -1), None)
            if original is not None:
                message = dict(message, request_seq=original)
        if message.get("type") == "request":
            handler = getattr(self, f"{message.get('command')}_request", None)
            if handler is not None and handler(message) is False:
                return  # answered here
        self.server.write(message)

    def _source(self) -> object:
        return self.remote if self.remote is not None else self.server_process

    def _from_server(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "response" and message.get("request_seq") in self._swallow:
            self._swallow.discard(message["request_seq"])
            return  # the proxy's own request
        name = message.get("event") if kind == "event" else message.get("command")
        if kind in ("event", "response"):
            handler = getattr(self, f"{name}_{kind}", None)
            if handler is not None:
                handler(message)
        if kind == "event" and name == "terminated":
            self._terminated = True
        self.to_client(message)

    def to_client(self, message: dict[str, Any]) -> None:
        with self._seq_lock:
            seq = next(self._seq)
            if message.get("type") == "request":  # a reverse request (runInTerminal...)
                self._reverse[seq] = message.get("seq", 0)
            self.client.write(dict(message, seq=seq))

    def _refuse(self, request: dict[str, Any], reason: str) -> None:
        if request.get("type") != "request":
            return
        self.to_client(
            {
                "type": "response",
                "request_seq": request.get("seq", 0),
                "success": False,
                "command": request.get("command", ""),
                "message": reason,
            }
        )

    def _tell_client_malformed(self, error: MalformedMessage) -> None:
        self.to_client(
            {
                "type": "event",
                "event": "output",
                "body": {"category": "important", "output": f"tensor-dap: ignored a {error}\n"},
            }
        )

    def _shutdown(self) -> None:
        """The client is gone: end debugpy (and with it the debuggee), leave nothing behind."""
        self.channel.close()
        if self.remote is not None:
            # attached: leave the program running, as a debugger that detaches does
            self.server.write(
                {
                    "type": "request",
                    "seq": 1_000_000,
                    "command": "disconnect",
                    "arguments": {"terminateDebuggee": False},
                }
            )
            self._reader.join(timeout=5)
            with contextlib.suppress(OSError):
                self.remote.close()
            return
        process = self.server_process
        if process.poll() is None:
            self.server.write(
                {
                    "type": "request",
                    "seq": 1_000_000,
                    "command": "disconnect",
                    "arguments": {"terminateDebuggee": True},
                }
            )
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_group(process)
        with contextlib.suppress(OSError):
            process.stdin.close()  # type: ignore[union-attr]

    # -- handlers: requests ----------------------------------------------------------------
    def launch_request(self, message: dict[str, Any]) -> Optional[bool]:
        arguments = message.setdefault("arguments", {})
        if not self._take_tensor_breakpoints(message):
            return False
        program, module = arguments.pop("program", None), arguments.pop("module", None)
        if not program and not module:
            self._refuse(message, "launch needs 'program' or 'module'")
            return False
        if program and "cwd" not in arguments:
            # the debuggee starts in the program's folder: name the program absolutely
            program = os.path.abspath(program)
            arguments["cwd"] = os.path.dirname(program)
        python = interpreter_command(arguments.get("python"))
        problem = missing_agent(python) if python is not None else None
        if problem is not None:
            self._refuse(message, problem)
            return False
        target = ["--program", program] if program else ["--module", module]
        user_args = split_args(arguments.get("args"))
        arguments["module"] = "tensor_dap.agent.debuggee"
        arguments["args"] = [*target, "--rules", ",".join(self.rules), "--", *user_args]
        env = dict(arguments.get("env") or {})
        env.update(self.channel.environment())
        arguments["env"] = env
        # tensor-dap's own frames are library code for stepping and "just my code"
        arguments["rules"] = [
            *(arguments.get("rules") or []),
            {"path": _PACKAGE_DIR, "include": False},
        ]
        return None

    def initialize_request(self, message: dict[str, Any]) -> Optional[bool]:
        self._initialize = message
        return None

    def attach_request(self, message: dict[str, Any]) -> Optional[bool]:
        arguments = message.setdefault("arguments", {})
        if not self._take_tensor_breakpoints(message):
            return False
        connect = arguments.get("connect")
        if isinstance(connect, dict) and self.remote is None:
            try:
                self._connect_remote(connect)
            except (OSError, ValueError, TypeError) as error:
                self._refuse(message, f"cannot reach the program to attach to: {error}")
                return False
        # a subprocess the launched program started (debugpyAttach): its agent reaches this
        # session's channel by itself, there is no `tensor-dap run` agent to look for
        self._attaching = "subProcessId" not in arguments
        arguments["rules"] = [
            *(arguments.get("rules") or []),
            {"path": _PACKAGE_DIR, "include": False},
        ]
        return None

    _attaching = False

    def _connect_remote(self, connect: dict[str, Any]) -> None:
        """Talk to the adapter ``debugpy.listen`` started in the program from now on.

        debugpy's stdio adapter cannot connect to it (only VS Code's extension does, by
        connecting its client socket there), so the proxy does what the extension does: it
        replays the client's ``initialize`` there (the answer already went to the client) and
        retires its local debugpy adapter.
        """
        address = (str(connect.get("host") or "127.0.0.1"), int(connect["port"]))
        remote = socket.create_connection(address, timeout=10)
        remote.settimeout(None)
        local = self.server_process
        self.remote = remote
        self.server = Writer(remote.makefile("wb"))
        self._reader = threading.Thread(
            target=self._pump_server,
            args=(remote.makefile("rb"), remote),
            name="tensor-dap-remote",
            daemon=True,
        )
        self._reader.start()
        if self._initialize is not None:
            self._swallow.add(self._initialize["seq"])
            self.server.write(self._initialize)
        with contextlib.suppress(OSError):
            local.stdin.close()  # type: ignore[union-attr]
        threading.Thread(target=_retire, args=(local,), daemon=True).start()

    def _take_tensor_breakpoints(self, message: dict[str, Any]) -> bool:
        """Apply ``tensorBreakpoints`` of a launch/attach; refuse the request if one is unknown."""
        try:
            self._rules_from_launch(message["arguments"])
        except (UnknownRuleError, BadRanksError) as error:
            self._refuse(message, str(error))
            return False
        return True

    def _rules_from_launch(self, arguments: dict[str, Any]) -> None:
        ranks = arguments.pop("tensorRanks", None)
        if ranks is not None:  # every tensor breakpoint only in these ranks of the job
            self.channel.ranks = ranks_spec(ranks)
            self.channel.set_rules(self.rules)
        wanted = arguments.pop("tensorBreakpoints", None)
        if wanted is None:
            return
        spec = ",".join(wanted) if isinstance(wanted, list) else str(wanted)
        self.rules = parse_rules(spec) if spec.strip() else []  # [] means none, not default
        self.channel.set_rules(self.rules)

    def setExceptionBreakpoints_request(self, message: dict[str, Any]) -> Optional[bool]:  # noqa: N802
        arguments = message.setdefault("arguments", {})
        filters = list(arguments.get("filters") or [])
        options = list(arguments.get("filterOptions") or [])
        ours = [f for f in filters if f in RULE_IDS]
        ours += [o.get("filterId") for o in options if o.get("filterId") in RULE_IDS]
        # launch's tensorBreakpoints stay on until the client itself ticks a tensor filter
        if ours:
            self._client_knows_tensor_filters = True
        if self._client_knows_tensor_filters:
            self.rules = [r for r in RULE_IDS if r in ours]
            self.channel.set_rules(self.rules)
        arguments["filters"] = [f for f in filters if f not in RULE_IDS]
        arguments["filterOptions"] = [o for o in options if o.get("filterId") not in RULE_IDS]
        self._pending_filters[message["seq"]] = filters + [o.get("filterId") for o in options]
        return None

    _client_knows_tensor_filters = False

    # -- handlers: what debugpy sends -----------------------------------------------------------
    def initialize_response(self, message: dict[str, Any]) -> None:
        body = message.setdefault("body", {}) or {}
        message["body"] = body
        filters = list(body.get("exceptionBreakpointFilters") or [])
        filters += [
            {
                "filter": rule.id,
                "label": rule.title,
                "description": rule.description,
                "default": False,
            }
            for rule in all_rules()
        ]
        body["exceptionBreakpointFilters"] = filters

    def setExceptionBreakpoints_response(self, message: dict[str, Any]) -> None:  # noqa: N802
        filters = self._pending_filters.pop(message.get("request_seq", -1), None)
        if filters is None or not message.get("success"):
            return
        body = message.setdefault("body", {}) or {}
        theirs = iter(body.get("breakpoints") or [])
        merged = []
        for name in filters:
            merged.append(
                {"verified": True} if name in RULE_IDS else next(theirs, {"verified": True})
            )
        body["breakpoints"] = merged
        message["body"] = body

    def process_event(self, message: dict[str, Any]) -> None:
        """Attach: reach the agent of the ``tensor-dap run`` process debugpy connected to."""
        pid = (message.get("body") or {}).get("systemProcessId")
        if self._attaching and isinstance(pid, int):
            threading.Thread(target=self._connect_agent, args=(pid,), daemon=True).start()

    def _connect_agent(self, pid: int) -> None:
        config = find_agent(pid)
        try:
            if config is None:
                raise OSError(f"process {pid} was not started with `tensor-dap run`")
            self.channel.connect(config)
        except OSError as error:
            self.to_client(
                {
                    "type": "event",
                    "event": "output",
                    "body": {
                        "category": "important",
                        "output": f"tensor-dap: no tensor breakpoints here: {error}\n",
                    },
                }
            )

    def stopped_event(self, message: dict[str, Any]) -> None:
        body = message.get("body") or {}
        if body.get("reason") != "exception":
            return
        match = _STOP_PREFIX.match(body.get("description") or "")
        if match and _names_breakpoint(body.get("text")) and match.group(1) in RULE_IDS:
            body["description"] = f"Paused on {match.group(1)}: {match.group(2)}"
            body["text"] = match.group(1)

    def variables_response(self, message: dict[str, Any]) -> None:
        """Mark tensors for VS Code's VARIABLES context menu ("View Tensor" shows on them only:
        ``debugProtocolVariableMenuContext == 'tensor'``)."""
        for variable in (message.get("body") or {}).get("variables") or []:
            if isinstance(variable, dict) and str(variable.get("value", "")).startswith(
                _TENSOR_VALUE
            ):
                variable["__vscodeVariableMenuContext"] = "tensor"

    def exceptionInfo_response(self, message: dict[str, Any]) -> None:  # noqa: N802
        body = message.get("body") or {}
        if not _names_breakpoint(body.get("exceptionId")):
            return
        match = _STOP_PREFIX.match(body.get("description") or "")
        if not match or match.group(1) not in RULE_IDS:
            return
        rule, text = match.group(1), match.group(2)
        body["exceptionId"] = rule
        body["description"] = text
        body["breakMode"] = "always"
        details = body.get("details") or {}
        details.update({"message": text, "typeName": rule, "fullTypeName": f"tensor-dap.{rule}"})
        stack = details.get("stackTrace")
        if isinstance(stack, str):
            # debugpy ends the trace with "tensor_dap.agent.suspend.TensorBreakpoint: [rule]
            # message": the message again, under an internal name; the widget shows it above
            cut = stack.find(f"{_BREAKPOINT_MODULE}.{_BREAKPOINT_CLASS}")
            if cut > 0:
                details["stackTrace"] = stack[:cut]
        body["details"] = details


def _names_breakpoint(text: Any) -> bool:
    """Whether debugpy's exception name is our TensorBreakpoint. Its first word: attached to a
    program started by a console script (``tensor-dap run``), debugpy appends "(note: full
    exception trace is shown but execution is paused at: <module>)"."""
    return str(text or "").split(" ", 1)[0].endswith(_BREAKPOINT_CLASS)


def _retire(process: subprocess.Popen) -> None:
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _kill_group(process)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, 9)
    except (OSError, AttributeError):
        process.kill()
