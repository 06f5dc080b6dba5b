"""The one exception type for problems with the user's input.

The CLI prints a ``UserError`` as one line on stderr and exits with status 2; anything else is a
bug and shows a traceback only with ``--debug`` (or ``SYMVRAM_DEBUG=1``).
"""


class UserError(ValueError):
    """Bad input: an unknown preset, a malformed config.json, an impossible setting."""


def did_you_mean(name: str, choices, n: int = 3, cutoff: float = 0.6) -> str:
    """The one "did you mean" of every message that names an unknown word: " (did you mean a, b?)" or "".

    >>> did_you_mean("hiden", ["hidden", "heads", "layers"])
    ' (did you mean hidden?)'
    >>> did_you_mean("zzz", ["hidden"])
    ''
    """
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=n, cutoff=cutoff)
    return f" (did you mean {', '.join(close)}?)" if close else ""
