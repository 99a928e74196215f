"""plain-error-messages: Numba's error messages built without terminal markup.

Process-wide: Numba keeps its colour scheme in one module global, `numba.core.errors.
_termcolor_inst`, read wherever an error message is built, so this cannot be limited to rtsoa's
functions. Typing tries candidate signatures and templates in turn, and every failed try builds
a `TypingError` whose message Numba marks up: with colorama installed, even the default
`no_color` theme wraps and unwraps stdout / stderr for each message (colorama `init` / `deinit`)
to add a bold escape. Compiling `device_malloc` cold built ~11,850 such messages, none shown.
Installed only while the scheme is the default; a user's own NUMBA_COLOR_SCHEME is kept. The
one visible difference: messages Numba prints lose their bold escape. Fallback: Numba's scheme.
Proposed to Numba (docs/numba-upstream.md).
"""

from rtsoa._numba import compat


def _install():
    if not compat.register(
        "plain-error-messages",
        "process",
        [
            "numba.core.config.COLOR_SCHEME",
            "numba.core.errors._termcolor_inst",
            "numba.core.errors._DummyColorScheme",
            "numba.core.errors.HighlightColorScheme",
        ],
        "no colorama round trip for each of the thousands of typing errors a compile builds",
    ):
        return False
    from numba.core import config, errors

    if config.COLOR_SCHEME != "no_color":
        compat.skip("plain-error-messages", f"NUMBA_COLOR_SCHEME={config.COLOR_SCHEME}")
        return False
    if isinstance(errors._termcolor_inst, PlainColorScheme):
        return True
    errors._termcolor_inst = PlainColorScheme()
    return True


def _plain_scheme():
    from numba.core import errors

    base = getattr(errors, "_DummyColorScheme", object)

    class PlainColorScheme(base):
        """Numba's no-colour scheme without the markup."""

        def code(self, msg):
            return msg

        errmsg = filename = indicate = highlight = reset = code

    return PlainColorScheme


PlainColorScheme = _plain_scheme()
INSTALLED = _install()
