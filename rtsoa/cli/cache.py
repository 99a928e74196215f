"""`rtsoa cache`: where rtsoa's caches live and their sizes (`info`); `clear` empties them."""

import json

from rtsoa import caches


def register(subcommands):
    """Add `cache` to the `rtsoa` subparsers."""
    parser = subcommands.add_parser(
        "cache", help="where rtsoa's caches live and their sizes; clear them"
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser):
    """`rtsoa cache info [--json]` and `rtsoa cache clear [NAME]`."""
    actions = parser.add_subparsers(dest="cache_action", required=True)
    shown = actions.add_parser("info", help="where each cache lives and its size")
    shown.add_argument("--json", action="store_true", help="print a JSON list")
    cleared = actions.add_parser("clear", help="delete one cache, or all")
    cleared.add_argument("name", nargs="?", choices=caches.NAMES, help="the cache (default: all)")


def run(args):
    """The `rtsoa cache` command."""
    if args.cache_action == "clear":
        removed, freed = caches.clear(args.name)
        print(f"cleared {args.name or 'all caches'}: {removed} entries, {freed:,} bytes")
        return 0
    rows = caches.info()
    if args.json:
        print(json.dumps(rows))
        return 0
    for row in rows:
        name, count, size = row["name"], row["entries"], row["bytes"]
        print(f"{name:<9} {count:>6} entries {size:>14,} bytes  {row['where']}")
    return 0
