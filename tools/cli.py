"""tasks.py's command line: its parser class, the refusal of an unknown argument (with the
closest option: "did you mean --reset?"), and a script's own argparse parser run on the
arguments tasks.py passes on to it, and nothing else: so a typo or ``--help`` is answered at
once, before any setup (``tasks.py grade``, ``assignments``, ``mutation``).

The script is loaded from its file (its imports at the top must be the standard library's,
which holds for the scripts tasks.py names) and its ``main(argv)`` is called with
``argparse.ArgumentParser.parse_args`` replaced, for that call only, by one that parses and
then stops: whatever ``main`` would do after parsing never runs.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path


class Parser(argparse.ArgumentParser):
    """argparse whose errors are the usage line and one line naming the problem, exit 2."""

    def error(self, message: str) -> None:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def refuse(
    commands: Mapping[str, argparse.ArgumentParser],
    name: str,
    unknown: Sequence[str],
    passes_on: Mapping[str, str],
    specific: Collection[str],
) -> None:
    """Exit 2: the usage of command ``name`` and its first unknown argument, with the closest
    option of this command or of another (not of the ``specific`` ones, whose options are
    their module's) and, for a command in ``passes_on``, how to pass it on (after ``--``)."""
    sub, word = commands[name], unknown[0]
    owner = {
        option: other
        for other in commands
        if other not in specific
        for action in commands[other]._actions
        for option in action.option_strings
    }
    owner.update({o: name for a in sub._actions for o in a.option_strings})  # its own first
    close = difflib.get_close_matches(word.split("=")[0], owner, n=1, cutoff=0.7)
    problem = f"unknown {'option' if word.startswith('-') else 'argument'} {word}"
    if close and owner[close[0]] == name:
        problem += f" (did you mean {close[0]}?)"
    elif close:
        problem += f" (did you mean `python3 tasks.py {owner[close[0]]} {close[0]}`?)"
    if name in passes_on:
        problem += (
            f"; arguments for {passes_on[name]} go after --: "
            f"python3 tasks.py {name} -- {' '.join(unknown)}"
        )
    sub.print_usage(sys.stderr)
    sub.exit(2, f"{sub.prog}: {problem} (see {sub.prog} --help)\n")


class _Parsed(Exception):
    """Raised by the replaced ``parse_args``: carries the namespace out of ``main``."""

    def __init__(self, namespace: argparse.Namespace) -> None:
        super().__init__("parsed")
        self.namespace = namespace


def parse_script_arguments(
    script: Path, args: Sequence[str], prog: str
) -> argparse.Namespace | None:
    """``args`` parsed by the parser that ``script``'s ``main(argv)`` builds, shown as ``prog``.

    A bad argument: argparse's SystemExit(2), after the usage and the error on stderr;
    ``--help``: the script's help on stdout, SystemExit(0). An abbreviated option is refused
    (``--work`` for ``--workers``), as in tasks.py's own parsers. None when this Python cannot load
    the script (a module it imports is missing): then only the script itself checks them.
    """
    spec = importlib.util.spec_from_file_location(f"_pgrl_arguments_of_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError:
        return None
    original = argparse.ArgumentParser.parse_args

    def parse_only(parser, argv=None, namespace=None):
        parser.prog, parser.allow_abbrev = prog, False  # as tasks.py's own: no --work for --workers
        raise _Parsed(original(parser, argv, namespace))

    argparse.ArgumentParser.parse_args = parse_only
    try:
        module.main(list(args))
    except _Parsed as parsed:
        return parsed.namespace
    finally:
        argparse.ArgumentParser.parse_args = original
    raise RuntimeError(f"{script}: main() returned without parsing its arguments")
