"""The ``tensor-dap`` command: ``check``, ``trace``, ``rules``, ``lint``, ``adapter``, ``run``,
``lsp``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tensor_dap.agent.rules import RULE_IDS, UnknownRuleError, parse_rules
from tensor_dap.catalog import SIMULATE_KINDS

USAGE_ERROR = 2
#: the rule ``--memory-limit`` turns on
MEMORY_LIMIT = "memory-limit"


def _check_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument(
        "--rules",
        default="default",
        help=f"comma list of rule ids, or default / all (rules: {', '.join(RULE_IDS)}); "
        "RULE@rank=LIST limits a rule to some ranks of a distributed run, LIST being ranks "
        "joined by + with A-B ranges: device-mismatch@rank=1, default@rank=0+2-3",
    )
    check.add_argument("--report", metavar="PATH", help="write the findings as JSON to PATH")
    check.add_argument(
        "--trace", metavar="PATH", help="trace store to write (default .tensor-dap/trace.db)"
    )
    check.add_argument(
        "--scalars",
        action="store_true",
        help="leaves-device: also report .item() / float(t) reads and one-element copies",
    )
    _simulate_argument(check)
    check.add_argument(
        "--memory",
        action="store_true",
        help="at the end, the peak of live tensor memory per device and the lines that made it "
        "(in the report: memory)",
    )
    _memory_limit_argument(check)
    check.add_argument("script", metavar="SCRIPT", nargs="?")
    check.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")


def _simulate_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--simulate",
        choices=SIMULATE_KINDS,
        help="run a CUDA program unmodified on the CPU as if one CUDA device (cuda:0) were there",
    )


def _memory_limit_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="stop (report) at the line whose op takes live tensor memory on a device past SIZE "
        "(6GiB, 512MiB, 1.5GB, or bytes), naming the lines that made it: turns on the rule "
        "memory-limit",
    )


def _memory_limit(
    parser: argparse.ArgumentParser, command: str, options: argparse.Namespace, rules: list[str]
) -> dict[str, dict[str, Any]]:
    """``--memory-limit``: the rule's option, and the rule added to ``rules``; a bad size is one
    line and exit status 2."""
    if options.memory_limit is None:
        return {}
    from tensor_dap.sizes import BadSize, parse_size

    try:
        nbytes = parse_size(options.memory_limit)
    except BadSize as error:
        parser.exit(USAGE_ERROR, f"tensor-dap {command}: --memory-limit: {error}\n")
    if not any(entry.split("@", 1)[0] == MEMORY_LIMIT for entry in rules):
        rules.append(MEMORY_LIMIT)
    return {MEMORY_LIMIT: {"bytes": nbytes}}


def _trace_arguments(trace: argparse.ArgumentParser) -> None:
    trace.add_argument("--output", metavar="FILE", help="write the trace to FILE, not stderr")
    trace.add_argument("--depth", type=int, help="trace calls at most N levels deep")
    trace.add_argument("--only", metavar="PATTERN", help="fnmatch on file path or function")
    trace.add_argument("--rules", default="default", help="comma list of rule ids, or default")
    trace.add_argument("--nan", action="store_true", help="flag NaN/Inf (reads tensor data)")
    trace.add_argument("--trace", metavar="PATH", help="trace store to write")
    # optional to argparse, checked in _trace: a REMAINDER after a required positional makes
    # argparse call ARGS required too
    _simulate_argument(trace)
    trace.add_argument("script", metavar="SCRIPT", nargs="?")
    trace.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def _rules_arguments(rules: argparse.ArgumentParser) -> None:
    rules.add_argument("--json", action="store_true", help="print them as JSON")


def _lint_arguments(lint: argparse.ArgumentParser) -> None:
    lint.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    lint.add_argument(
        "--severity",
        choices=("error", "warning", "information", "hint"),
        default="information",
        help="report findings of this severity or worse (default information: hints, such as "
        "a .data write in an init function, are left out)",
    )
    lint.add_argument("paths", metavar="PATH", nargs="*")


def _adapter_arguments(adapter: argparse.ArgumentParser) -> None:
    adapter.add_argument("--port", type=int, help="serve one client on this loopback TCP port")
    adapter.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    adapter.add_argument(
        "--rules",
        metavar="RULES",
        help="the tensor breakpoints the coming launch or attach turns on (comma list, may be "
        "empty): their checkboxes start ticked, and the client's exception-breakpoint requests "
        "say which rules are on from the start (what VS Code's extension passes)",
    )


def _run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--listen", required=True, metavar="[HOST:]PORT", help="debugpy's address")
    run.add_argument("--wait", action="store_true", help="wait for the debugger before starting")
    run.add_argument("--rules", default="", help="rules enabled before a debugger attaches")
    _memory_limit_argument(run)
    run.add_argument(
        "--allow-remote", action="store_true", help="allow a HOST that is not loopback"
    )
    _simulate_argument(run)
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a module, not a script")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]")


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


@dataclass(frozen=True)
class _Command:
    """A subcommand as ``tensor-dap --help`` and ``tensor-dap COMMAND --help`` show it."""

    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    usage: Optional[str] = None


# in the order ``tensor-dap --help`` lists them
_COMMANDS = {
    "check": _Command(
        help="run a script and report tensor bugs",
        usage="tensor-dap check [options] SCRIPT [ARGS...]\n"
        "       tensor-dap check [options] -- COMMAND [ARGS...]",
        description="Run SCRIPT as `python SCRIPT ARGS...` would, watching every tensor "
        "operation, and report the problems the rules find. After `--`, run COMMAND instead "
        "(`-- torchrun --nproc_per_node 2 train.py`, `-- python -m torch.distributed.run ...`). "
        "Every Python process the run starts (torchrun ranks, DataLoader workers) is watched; "
        "one merged report labels each finding with its rank, worker or pid. Exit status: the "
        "program's own when it failed, else 0 clean, 1 findings (in any process); 2 usage error.",
        arguments=_check_arguments,
    ),
    "trace": _Command(
        help="run a script, printing each line of user code with its tensors",
        usage="tensor-dap trace [options] SCRIPT [ARGS...]",
        description="Run SCRIPT as `python SCRIPT ARGS...` would, printing each executed line "
        "of user code with the variables it made or changed (tensors as shape, dtype, device, "
        "grad), loops summarised, and the rules' findings inline. Exit status: the script's.",
        arguments=_trace_arguments,
    ),
    "rules": _Command(
        help="list the rules (ids, checkbox titles, defaults)",
        description="List the rules `--rules`, `tensorBreakpoints` and the editor's breakpoint "
        "checkboxes take, with what each reports.",
        arguments=_rules_arguments,
    ),
    "lint": _Command(
        help="report PyTorch pitfalls found in the source, without running it",
        usage="tensor-dap lint [--format text|json] [--severity LEVEL] [PATH...]",
        description="Run the language server's static lints on each PATH (a file, or a folder "
        "walked for *.py; default: the current folder) and print one line per finding: "
        "`path:line:col code message`. A `# tensor-dap: ignore[code]` comment (or a bare "
        "`# tensor-dap: ignore`) silences its line. Exit status: 0 clean, 1 findings, 2 usage "
        "error.",
        arguments=_lint_arguments,
    ),
    "lsp": _Command(
        help="run the language server on stdio",
        description="Speak LSP on stdin/stdout: inlay hints, hovers and diagnostics from the "
        "trace store at <workspace root>/.tensor-dap/trace.db ($TENSOR_DAP_TRACE overrides).",
        arguments=_no_arguments,
    ),
    "adapter": _Command(
        help="the debug adapter (DAP on stdio, or --port)",
        description="Speak the Debug Adapter Protocol on stdin/stdout, in front of debugpy.",
        arguments=_adapter_arguments,
    ),
    "run": _Command(
        help="run a script under debugpy and the tensor agent, for a debugger to attach",
        description="Run SCRIPT (or -m MODULE) as python would, with debugpy listening on "
        "HOST:PORT and the tensor agent loaded: attach with `tensor-dap adapter` "
        '(attach arguments {"connect": {"host": HOST, "port": PORT}}) to get tensor breakpoints.',
        arguments=_run_arguments,
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensor-dap", description="A PyTorch-aware debugger and checker."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in _COMMANDS.items():
        command.arguments(
            commands.add_parser(
                name, help=command.help, description=command.description, usage=command.usage
            )
        )
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    options, command = _split_command(parser, argv)
    if options.command == "check":
        return _check(parser, options, command)
    if options.command == "adapter":
        from tensor_dap.adapter.main import main as adapter_main

        return adapter_main(options.port, options.host, options.rules)
    if options.command == "trace":
        return _trace(parser, options)
    if options.command == "rules":
        from tensor_dap.rules_command import print_rules

        return print_rules(sys.stdout, as_json=options.json)
    if options.command == "lint":
        from tensor_dap.lint_command import run_lint

        return run_lint(
            options.paths, sys.stdout, sys.stderr, options.format == "json", options.severity
        )
    if options.command == "run":
        return _run(parser, options)
    if options.command == "lsp":
        from tensor_dap.lsp.server import main as lsp_main

        return lsp_main()
    parser.print_help(sys.stderr)
    return USAGE_ERROR


def _split_command(
    parser: argparse.ArgumentParser, argv: list[str]
) -> tuple[argparse.Namespace, Optional[list[str]]]:
    """``check [options] -- COMMAND ...``: the options, and the command after ``--``.

    A ``--`` after the script belongs to the script's arguments, as with python.
    """
    if argv[:1] == ["check"] and "--" in argv:
        cut = argv.index("--")
        options = parser.parse_args(argv[:cut])
        if options.script is None:
            return options, argv[cut + 1 :]
        options.args = [*options.args, *argv[cut:]]
        return options, None
    return parser.parse_args(argv), None


def _check(
    parser: argparse.ArgumentParser,
    options: argparse.Namespace,
    command: Optional[list[str]] = None,
) -> int:
    try:
        rules = parse_rules(options.rules)
    except UnknownRuleError as error:
        parser.exit(USAGE_ERROR, f"tensor-dap check: {error}\n")
    rule_options = _memory_limit(parser, "check", options, rules)
    if options.scalars:
        rule_options["leaves-device"] = {"scalars": True}
    _prepare_outputs(parser, "check", [(options.report, "--report"), (options.trace, "--trace")])
    if command is None:
        if options.script is None:
            parser.exit(USAGE_ERROR, "tensor-dap check: SCRIPT (or -- COMMAND) is required\n")
        if not os.path.isfile(options.script):
            parser.exit(USAGE_ERROR, f"tensor-dap check: no such script: {options.script}\n")
    elif not command:
        parser.exit(USAGE_ERROR, "tensor-dap check: a COMMAND is required after --\n")
    from tensor_dap.check import CheckRequest, run_check, run_check_command

    request = CheckRequest(rules, options.report, options.trace, rule_options, options.simulate)
    if options.memory:
        request = dataclasses.replace(request, memory=True)
    if command is not None:
        return run_check_command(command, request)
    return run_check(options.script, options.args, request)


def _prepare_outputs(
    parser: argparse.ArgumentParser, command: str, paths: list[tuple[Optional[str], str]]
) -> None:
    """Refuse, before anything runs, output paths the run could not write."""
    from tensor_dap.output_paths import BadOutputPath, prepare

    for path, what in paths:
        try:
            prepare(path, what)
        except BadOutputPath as error:
            parser.exit(USAGE_ERROR, f"tensor-dap {command}: {error}\n")


def _trace(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    try:
        rules = parse_rules(options.rules)
    except UnknownRuleError as error:
        parser.exit(USAGE_ERROR, f"tensor-dap trace: {error}\n")
    if options.script is None:
        parser.exit(USAGE_ERROR, "tensor-dap trace: SCRIPT is required\n")
    if not os.path.isfile(options.script):
        parser.exit(USAGE_ERROR, f"tensor-dap trace: no such script: {options.script}\n")
    _prepare_outputs(parser, "trace", [(options.output, "--output"), (options.trace, "--trace")])
    from tensor_dap.linetrace.command import run_trace

    return run_trace(
        options.script,
        options.args,
        rules,
        options.output,
        options.depth,
        options.only,
        options.nan,
        options.trace,
        options.simulate,
    )


def _run(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    import ipaddress

    host, _, port = options.listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit():
        parser.exit(USAGE_ERROR, f"tensor-dap run: bad --listen address: {options.listen}\n")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not options.allow_remote:
        parser.exit(
            USAGE_ERROR,
            f"tensor-dap run: {host} is not a loopback address; pass --allow-remote to "
            "let other machines attach\n",
        )
    try:
        rules = parse_rules(options.rules) if options.rules else []
    except UnknownRuleError as error:
        parser.exit(USAGE_ERROR, f"tensor-dap run: {error}\n")
    rule_options = _memory_limit(parser, "run", options, rules)
    args, script = list(options.args), None
    if options.module is None:
        if not args:
            parser.exit(USAGE_ERROR, "tensor-dap run: SCRIPT or -m MODULE is required\n")
        script = args.pop(0)
        if not os.path.isfile(script):
            parser.exit(USAGE_ERROR, f"tensor-dap run: no such script: {script}\n")
    from tensor_dap.agent.debuggee import run_listening

    return run_listening(
        host,
        int(port),
        options.wait,
        rules,
        script,
        options.module,
        args,
        options.simulate,
        rule_options,
    )


if __name__ == "__main__":
    sys.exit(main())
