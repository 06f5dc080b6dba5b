"""The one exception type for problems with the user's input.

The CLI prints a ``UserError`` as one line on stderr and exits with status 2; anything else is a
bug and shows a traceback only with ``--debug`` (or ``SYMVRAM_DEBUG=1``).
"""


class UserError(ValueError):
    """Bad input: an unknown preset, a malformed config.json, an impossible setting."""
