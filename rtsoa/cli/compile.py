"""`rtsoa compile [--all | MODEL ...]`: compile ops into the cache ahead of time
(`rtsoa.ops.library`)."""

from rtsoa.ops import library


def register(subcommands):
    """Add `compile` to the `rtsoa` subparsers."""
    parser = subcommands.add_parser(
        "compile", help="compile ops ahead of time: --all, or a model's ops"
    )
    library.add_arguments(parser)
    parser.set_defaults(handler=library.run)
