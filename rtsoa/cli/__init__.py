"""The `rtsoa` command line: gen, inspect, lower, run, batch, cache.

One module per group of subcommands, each with a `register(subcommands)` that adds its
subparsers and sets each one's `handler` (called with the parsed arguments; it returns the exit
status or None for 0). A new subcommand is one such module plus its entry in `GROUPS`. Run
summaries shared with batch jobs live in `rtsoa.report`, below the command line.
"""

import os
import sys

from rtsoa._version import __version__
from rtsoa.cli import batch, cache, compile, graph, model
from rtsoa.cli.arguments import Parser
from rtsoa.errors import RtsoaError

GROUPS = (graph, model, batch, compile, cache)  # in the order `rtsoa --help` lists them


def build_parser():
    """The `rtsoa` argument parser with every group's subcommands."""
    parser = Parser(prog="rtsoa", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    subcommands = parser.add_subparsers(dest="command", parser_class=Parser)
    for group in GROUPS:
        group.register(subcommands)
    return parser


def main(argv=None):
    """Run the `rtsoa` command line on `argv` (default: sys.argv[1:]); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(__version__)
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    try:
        status = args.handler(args)
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except RtsoaError as error:
        print(f"rtsoa {args.command}: error: {error}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:
        print(f"rtsoa {args.command}: error: {error}", file=sys.stderr)
        return 1
    except MemoryError:  # estimates refuse what cannot fit; this is the machine running short
        print(f"rtsoa {args.command}: error: out of memory", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:  # Ctrl-C: a run stops cleanly first (RunInterrupted)
        if args.command != "run":
            raise
        executed = getattr(interrupt, "nodes_executed", None)
        where = "" if executed is None else f": the run stopped after {executed:,} node(s)"
        print(f"rtsoa {args.command}: interrupted{where}", file=sys.stderr)
        return 130
    return status or 0
