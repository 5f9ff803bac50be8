"""The ``tensor-dap`` command: ``check`` now; ``trace``, ``adapter``, ``lsp`` as they land."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from tensor_dap.agent.rules import RULE_IDS, UnknownRuleError, parse_rules

USAGE_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensor-dap", description="A PyTorch-aware debugger and checker."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="run a script and report tensor bugs",
        description="Run SCRIPT as `python SCRIPT ARGS...` would, watching every tensor "
        "operation, and report the problems the rules find. Exit status: 0 clean, 1 findings "
        "or the script failed, 2 usage error.",
    )
    check.add_argument(
        "--rules",
        default="default",
        help=f"comma list of rule ids, or default / all (rules: {', '.join(RULE_IDS)})",
    )
    check.add_argument("--report", metavar="PATH", help="write the findings as JSON to PATH")
    check.add_argument(
        "--trace", metavar="PATH", help="trace store to write (default .tensor-dap/trace.db)"
    )
    check.add_argument(
        "--scalars",
        action="store_true",
        help="leaves-device: also report .item() / float(t) reads of accelerator tensors",
    )
    check.add_argument("script", metavar="SCRIPT")
    check.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    parser = _parser()
    options = parser.parse_args(argv)
    if options.command == "check":
        return _check(parser, options)
    parser.print_help(sys.stderr)
    return USAGE_ERROR


def _check(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    try:
        rules = parse_rules(options.rules)
    except UnknownRuleError as error:
        parser.exit(USAGE_ERROR, f"tensor-dap check: {error}\n")
    if not os.path.isfile(options.script):
        parser.exit(USAGE_ERROR, f"tensor-dap check: no such script: {options.script}\n")
    from tensor_dap.check import run_check

    rule_options = {"leaves-device": {"scalars": True}} if options.scalars else None
    return run_check(
        options.script, options.args, rules, options.report, options.trace, rule_options
    )


if __name__ == "__main__":
    sys.exit(main())
