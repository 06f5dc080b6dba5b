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


EXCERPT = 60  # characters of a value a message shows


def excerpt(value, width: int = EXCERPT) -> str:
    """A value as a message shows it: its repr, cut to about ``width`` characters (a long string says how
    long it was), computed without rendering the whole value (a list of a million items costs a few items).

    >>> excerpt("fp8"), excerpt([1, [2, [3, [4]]]]), excerpt(list(range(100)))
    ("'fp8'", '[1, [2, [...]]]', '[0, 1, 2, 3, ...]')
    >>> excerpt("x" * 1000, 20)
    "'xxxxxxx...xxxxxxxx' (1000 characters)"
    >>> excerpt(10 ** 5000)
    'an integer of about 5001 digits'
    """
    import reprlib

    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    r = reprlib.Repr()
    r.maxstring = r.maxother = r.maxlong = width
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset, r.maxfrozenset = 2, 4, 4, 4, 4, 4
    shown = r.repr(value)
    if len(shown) > 2 * width:  # a mapping of long keys, a list of long strings
        shown = shown[:2 * width] + "…"
    if isinstance(value, str) and len(value) > width:
        shown += f" ({len(value)} characters)"
    return shown


MAX_WORD = 120      # a longer run without spaces in a message is a value: shown by its ends
MAX_MESSAGE = 600   # characters of one message line


def one_line(text: str) -> str:
    """A message on one line: a word longer than MAX_WORD cut to its ends, the line to MAX_MESSAGE
    characters (the sources quote values through ``excerpt``; this is the net under them).

    >>> one_line("got " + "9" * 5000)
    'got 9999999999…9999999999 (5000 characters)'
    """
    words = [w if len(w) <= MAX_WORD else f"{w[:10]}…{w[-10:]} ({len(w)} characters)" for w in text.split()]
    line = " ".join(words)
    return line if len(line) <= MAX_MESSAGE else line[:MAX_MESSAGE - 20] + " … (message cut)"
