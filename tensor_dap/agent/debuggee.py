"""``python -m tensor_dap.agent.debuggee --program P | --module M [-- ARGS]``: what the debug
adapter launches in place of the user's program.

Connects to the adapter's agent channel, runs the user's program exactly as python would under
the watch engine, and pauses the debugger at the user's line for each finding of an enabled
rule. Rules ticked later arrive through the channel and apply at once. With ``--trace`` it
writes what its lines produce into the trace store while it runs
(:mod:`tensor_dap.agent.live_trace`), so the engine is installed from the start; without it and
with no rule enabled at start nothing is installed, and ticking one later installs the engine on
the main thread from a real-time signal (POSIX) — the engine's mode is per thread.

``tensor-dap run`` uses :func:`run_listening`: the same, under a listening debugpy that an
adapter attaches to, with the channel the other way round (the agent listens).
"""

from __future__ import annotations

import argparse
import logging
import runpy
import sys
from typing import Any, Callable, Optional

from tensor_dap.agent import data_watch, memory_view
from tensor_dap.agent.channel import ChannelClient, ChannelListener
from tensor_dap.agent.engine import Watch
from tensor_dap.agent.late_start import Starter
from tensor_dap.agent.live_trace import start_live_trace
from tensor_dap.agent.suspend import suspend_on_finding
from tensor_dap.agent.trace_session import TraceSession
from tensor_dap.channel_protocol import address_from_environment
from tensor_dap.runner import ExitInfo, run_script
from tensor_dap.tracedb import run_command

log = logging.getLogger("tensor_dap.agent")

#: per-rule options, as :class:`~tensor_dap.agent.engine.Watch` takes them
RuleOptions = dict[str, dict[str, Any]]


def limit_options(nbytes: Optional[int]) -> RuleOptions:
    """The ``memory-limit`` rule's options for a limit of ``nbytes`` (None: no limit)."""
    return {"memory-limit": {"bytes": nbytes}} if nbytes else {}


#: seconds ``tensor-dap run --wait`` waits for an attaching adapter's rules (plain debugpy
#: clients send none)
_FIRST_RULES_TIMEOUT = 2.0


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tensor_dap.agent.debuggee")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--program")
    target.add_argument("--module")
    parser.add_argument("--rules", default="", help="comma list used when no adapter is reachable")
    parser.add_argument("--trace", help="the trace store to write (agent.live_trace)")
    parser.add_argument("--trace-run", type=int, help="the store's run, begun by the adapter")
    parser.add_argument("--simulate", help="a device kind to simulate (tensor_dap.simulate)")
    parser.add_argument(
        "--memory-limit", type=int, help="bytes: the memory-limit rule's limit (tensorMemoryLimit)"
    )
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if options.args and options.args[0] == "--":
        options.args = options.args[1:]
    return options


def _run_module(name: str, args: list[str]) -> ExitInfo:
    saved = sys.argv
    sys.argv = [name, *args]
    try:
        runpy.run_module(name, run_name="__main__", alter_sys=True)
        return ExitInfo("ok", 0)
    except SystemExit as stop:
        code = stop.code
        return ExitInfo("exit", code if isinstance(code, int) else (0 if code is None else 1))
    # anything else escapes: debugpy's "uncaught exception" breakpoint must see it as uncaught
    finally:
        sys.argv = saved


def _show_origins_in_variables(watch: Watch) -> None:
    """Give the Variables view's "created at" child the engine's provenance."""
    import tensor_dap.render

    def created_at(tensor: object) -> Optional[str]:
        prov = watch.provenance.lookup(tensor)
        return f"{prov.where()} by {prov.op}" if prov is not None else None

    tensor_dap.render.provenance_hook = created_at


def _watch(rules: list[str], options: Optional[RuleOptions] = None) -> tuple[Watch, Starter]:
    """The watch that suspends the debugger on findings, and its rule-change starter."""
    watch = Watch(rules=rules, on_finding=suspend_on_finding, options=options)
    _show_origins_in_variables(watch)
    memory_view.bind(watch)  # the memory view's lines (tensor-dap memory)
    starter = Starter(watch)
    data_watch.bind(watch, starter.wake)  # the debugger's data breakpoints
    return watch, starter


def _run(
    watch: Watch,
    session: Optional[TraceSession],
    program: Optional[str],
    module: Optional[str],
    args: list[str],
) -> int:
    # an exception escapes as it is (debugpy's uncaught-exception stop must see it uncaught)
    exit_info = ExitInfo("exception", 1, "the program raised an exception")
    try:
        with watch:
            try:
                exit_info = (
                    run_script(program, args, reraise=True)
                    if program
                    else _run_module(module or "", args)
                )
            finally:
                data_watch.program_ended()
    finally:
        sys.stdout.flush()
        if session is not None:
            session.finish(exit_info.to_json())
    return exit_info.code


def main(argv: Optional[list[str]] = None) -> int:
    options = _parse(sys.argv[1:] if argv is None else argv)
    rules = [r for r in options.rules.split(",") if r]
    _start_simulation(options.simulate)
    rule_options = limit_options(options.memory_limit)
    watch, starter = _watch(rules, rule_options)
    session = start_live_trace(watch, options.trace, options.trace_run) if options.trace else None
    config = address_from_environment()
    if config is not None:
        try:
            client = ChannelClient(
                config,
                starter.rules_changed,
                on_flush=_flusher(session),
                on_message=data_watch.channel_message,
            )
            if client.first_rules is not None:
                rules = client.first_rules
                watch.set_enabled(rules)
        except OSError as error:
            print(f"tensor-dap: cannot reach the debug adapter: {error}", file=sys.stderr)
    _follow_children(watch, rules, session, options.simulate, rule_options)
    return _run(watch, session, options.program, options.module, options.args)


def _start_simulation(kind: Optional[str]) -> None:
    """``--simulate KIND``; before the watch: its mode must lie above the simulation's."""
    if kind:
        from tensor_dap import simulate

        simulate.start(kind)


def _flusher(session: Optional[TraceSession]) -> Optional[Callable[[], None]]:
    """What the agent does when the adapter says the program paused: write the rows."""
    return session.flush if session is not None else None


def _follow_children(
    watch: Watch,
    rules: list[str],
    session: Optional[TraceSession],
    simulate: Optional[str] = None,
    options: Optional[RuleOptions] = None,
) -> None:
    """Tensor breakpoints in the program's child processes too (``"subProcess": true``):
    Python children get the agent through the bootstrap and reach the adapter's channel
    themselves; forked ones (DataLoader workers) keep this watch and reconnect. Both write
    their rows into this session's trace-store run."""
    from tensor_dap.agent.child import ProcessAgent, follow_forks
    from tensor_dap.agent.spread import ChildConfig, Exported

    config = ChildConfig(
        rules=list(rules), options=dict(options or {}), suspend=True, simulate=simulate
    )
    if session is not None and session.run_id is not None:
        config.trace, config.run_id = session.db_path, session.run_id
    agent = ProcessAgent(config, watch, own_process=True)
    agent.session = session
    follow_forks(agent)
    Exported(config)


def run_listening(
    host: str,
    port: int,
    wait: bool,
    rules: list[str],
    program: Optional[str],
    module: Optional[str],
    args: list[str],
    simulate: Optional[str] = None,
    options: Optional[RuleOptions] = None,
) -> int:
    """``tensor-dap run``: the program under debugpy listening on ``host:port``, with the agent.

    The agent listens on its own loopback channel (see ``ChannelListener``) for the adapter
    that attaches; the rules it sends apply as with launch. ``simulate``: as ``--simulate``.
    """
    import debugpy

    _start_simulation(simulate)
    watch, starter = _watch(rules, options)
    session = start_live_trace(watch, command=run_command("run", simulate))
    # debugpy listens first: the agent's published address tells a client it may attach now
    debugpy.listen((host, port))
    listener = ChannelListener(
        starter.rules_changed, on_flush=_flusher(session), on_message=data_watch.channel_message
    )
    try:
        if wait:
            debugpy.wait_for_client()
            # a tensor-dap adapter connects to the agent right after the client attached;
            # give its rules a moment to arrive before the first line runs
            listener.first_rules.wait(_FIRST_RULES_TIMEOUT)
        return _run(watch, session, program, module, args)
    finally:
        listener.close()


if __name__ == "__main__":
    sys.exit(main())
