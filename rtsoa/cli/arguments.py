"""What the commands share: one-line argument errors, byte-size arguments, the progress bar,
the lowering's --no-winograd."""

import argparse

from tqdm import tqdm

from rtsoa.limits import addressable_memory, format_size, parse_size


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `rtsoa run: error: argument --repeat: ...`."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def progress(total, description, enabled):
    """A progress bar of `total` steps, shown when `enabled` and stderr is a terminal."""
    # disable=None: tqdm shows the bar only when stderr is a terminal.
    return tqdm(
        total=total, desc=description, unit="step", disable=None if enabled else True, leave=False
    )


def no_winograd(parser, scope=""):
    """`--no-winograd` (args.winograd False): the lowering keeps 3x3 stride-1 convs direct.
    `scope`: what the flag applies to, at the start of its help."""
    parser.add_argument(
        "--no-winograd",
        dest="winograd",
        action="store_false",
        help=f"{scope}keep 3x3 stride-1 convs direct (bit for bit, not by Winograd's F(2x2, 3x3))",
    )


def arena_size(text):
    """`--device-hbm`: a byte size ('512MiB', '16GiB', ...) the machine can hold."""
    try:
        size = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the arena needs at least one byte")
    limit = addressable_memory()
    if size > limit:
        raise argparse.ArgumentTypeError(
            f"{text!r} is {format_size(size)}, more than this machine's memory "
            f"({format_size(limit)}): the arena is a real, lazily zeroed buffer"
        )
    return size
