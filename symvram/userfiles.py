"""The one way the tool reads a file the user names (a config.json, a training config): a regular file,
at most a given size, never blocking. A named pipe, a device, a directory or a loop of symbolic links is
refused up front, in one line.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> os.mkfifo(os.path.join(d, "pipe"))
>>> read_user_file(os.path.join(d, "pipe"), "pipe", 100)
Traceback (most recent call last):
...
symvram.errors.UserError: pipe is a named pipe, not a regular file
"""
from __future__ import annotations

import errno
import os
import stat

from .errors import UserError

KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def read_user_file(path, shown: str, max_bytes: int, what: str = "this file", missing: str | None = None) -> bytes:
    """The bytes of ``path`` (``shown`` in messages), refused when it is not a regular file or is larger
    than ``max_bytes`` (too large for ``what``); ``missing``: the message when nothing is there."""
    try:
        # O_NONBLOCK: opening a named pipe for reading would otherwise wait for a writer, forever
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise UserError(missing or f"{shown}: no such file") from None
    except ValueError:  # os.open refuses the name itself
        raise UserError(f"{shown}: a file name cannot hold a NUL character") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"{shown}: a loop of symbolic links, not a file") from None
        if e.errno == errno.EISDIR:
            raise UserError(f"{shown} is a directory, not a file") from None
        raise UserError(f"{shown}: cannot read it ({e.strerror or e})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in KINDS if test(mode)), "not a regular file")
            raise UserError(f"{shown} is {kind}, not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    except OSError as e:
        raise UserError(f"{shown}: cannot read it ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UserError(f"{shown}: over {max_bytes} bytes is too large for {what}")
    return data


def unreadable(e: Exception) -> str:
    """Why a parser refused a value, in the user's terms (an integer past Python's digit limit says so,
    not "use sys.set_int_max_str_digits()").

    >>> import json
    >>> try:
    ...     json.loads("1" * 5000)
    ... except ValueError as e:
    ...     unreadable(e)
    'an integer of more than 4300 digits'
    """
    import sys

    if isinstance(e, ValueError) and "integer string conversion" in str(e):
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return " ".join(str(e).split())[:200]


def expanded_size(root, children, limit: int) -> int | None:
    """How many values ``root`` holds with every shared part counted each time it is reached (a YAML
    alias expands where it is used), or None past ``limit`` — computed once per shared part, so an
    alias bomb costs its file's size, not its expansion. A value that contains itself raises ValueError.

    >>> shared = [1, 2, 3]
    >>> expanded_size([shared, shared], lambda v: v if isinstance(v, list) else (), 100)
    9
    >>> bomb = [0]
    >>> for _ in range(30):
    ...     bomb = [bomb] * 9
    >>> expanded_size(bomb, lambda v: v if isinstance(v, list) else (), 10**6) is None
    True
    """
    sizes: dict[int, int] = {}
    open_: set[int] = set()          # started, not finished: the path from the root (a value met again: a cycle)
    stack = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_.discard(key)
            total = 1 + sum(sizes[id(c)] for c in children(node))
            if total > limit:
                return None
            sizes[key] = total
        elif key not in sizes:
            open_.add(key)
            stack.append((node, True))
            for child in children(node):
                if id(child) in open_:
                    raise ValueError("an alias inside its own anchor: a value that contains itself")
                if id(child) not in sizes:
                    stack.append((child, False))
    return sizes[id(root)]
