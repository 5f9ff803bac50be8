"""One debug session: the proxy (:mod:`~tensor_dap.adapter.proxy`) with tensor-dap's handlers.

Each request, response or event the session cares about has one handler, named here:
``launch`` (:mod:`~tensor_dap.adapter.launch`), ``attach`` (:mod:`~tensor_dap.adapter.attach`),
the rule checkboxes and the stops on findings
(:mod:`~tensor_dap.adapter.tensor_breakpoints`), the trace-store run of a launch
(:mod:`~tensor_dap.adapter.session_trace`), the tensors in VARIABLES, and the data breakpoints on
tensors (:mod:`~tensor_dap.adapter.data_breakpoints`), and the memory view
(:mod:`~tensor_dap.adapter.memory_requests`).
"""

from __future__ import annotations

import sys
from typing import BinaryIO, Callable, Optional

from tensor_dap.adapter.agent_channel import AgentChannel
from tensor_dap.adapter.attach import Attach
from tensor_dap.adapter.data_breakpoints import DataBreakpoints
from tensor_dap.adapter.launch import rewrite_launch
from tensor_dap.adapter.memory_requests import MemoryRequests
from tensor_dap.adapter.proxy import Message, Proxy
from tensor_dap.adapter.session_trace import SessionTrace
from tensor_dap.adapter.tensor_breakpoints import TensorBreakpoints

_TENSOR_VALUE = "tensor<"
"""How the renderers begin a tensor's value line (tensor_dap.render.tensor.value_line)."""


class ProxySession(Proxy):
    def __init__(
        self,
        client_in: BinaryIO,
        client_out: BinaryIO,
        python: str = sys.executable,
        ticked: Optional[str] = None,
    ):
        super().__init__(client_in, client_out, python)
        self.channel = AgentChannel()
        self.breakpoints = TensorBreakpoints(self.channel, self.tell_client, ticked)
        self.attach = Attach(self, self.breakpoints)
        self.trace = SessionTrace(self.tell_client)
        self.handlers.update(
            {
                "initialize_request": self._remember_initialize,
                "launch_request": lambda m: rewrite_launch(m, self.breakpoints, self.trace),
                "attach_request": self.attach.request,
                "setExceptionBreakpoints_request": self.breakpoints.filters_request,
                "initialize_response": self.breakpoints.advertise,
                "setExceptionBreakpoints_response": self.breakpoints.filters_response,
                "process_event": self.attach.process_event,
                "stopped_event": self._stopped,
                "exceptionInfo_response": self.breakpoints.exception_info,
                "variables_response": mark_tensors,
                "disconnect_request": self.trace.stopping,
                "terminate_request": self.trace.stopping,
                "exited_event": self.trace.exited,
            }
        )
        self._data_breakpoints()
        self._memory_view()

    def _data_breakpoints(self) -> None:
        """ "Break on Value Change" on tensors: its handlers, after the ones above."""
        data = DataBreakpoints(self.channel, self.to_client, self.tell_client)
        for name, handler in {
            "initialize_response": data.advertise,
            "stopped_event": data.stopped,
            "variables_response": data.variables_response,
            "scopes_response": data.scopes_response,
            "scopes_request": data.scopes_request,
            "variables_request": data.variables_request,
            "dataBreakpointInfo_request": data.info_request,
            "evaluate_response": data.evaluate_response,
            "setDataBreakpoints_request": data.set_request,
        }.items():
            self.handlers[name] = _chain(self.handlers.get(name), handler)

    def _memory_view(self) -> None:
        """``tensor-dap memory`` and ``tensorMemory``: their handlers, after the ones above."""
        memory = MemoryRequests()
        for name, handler in {
            "stopped_event": memory.stopped,
            "stackTrace_request": memory.stack_request,
            "stackTrace_response": memory.stack_response,
            "evaluate_request": memory.evaluate_request,
            "evaluate_response": memory.evaluate_response,
            "tensorMemory_request": memory.memory_request,
        }.items():
            self.handlers[name] = _chain(self.handlers.get(name), handler)

    def _remember_initialize(self, message: Message) -> None:
        self.initialize = message

    def _stopped(self, message: Message) -> None:
        """A pause: named after its rule when a finding caused it, and every agent writes its
        trace-store rows now, so the editor shows the lines that ran (the flush threads would
        within a second)."""
        self.breakpoints.stopped(message)
        self.channel.flush()

    def _shutdown(self) -> None:
        self.channel.close()
        super()._shutdown()
        self.trace.end()


def mark_tensors(message: Message) -> None:
    """Mark tensors for VS Code's VARIABLES context menu ("View Tensor" shows on them only:
    ``debugProtocolVariableMenuContext == 'tensor'``)."""
    for variable in (message.get("body") or {}).get("variables") or []:
        if isinstance(variable, dict) and str(variable.get("value", "")).startswith(_TENSOR_VALUE):
            variable["__vscodeVariableMenuContext"] = "tensor"


def _chain(
    first: Optional[Callable[[Message], None]], then: Callable[[Message], None]
) -> Callable[[Message], None]:
    """``first`` (if any) then ``then``, for one message."""
    if first is None:
        return then

    def both(message: Message) -> None:
        first(message)
        then(message)

    return both
