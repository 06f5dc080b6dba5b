import sys

from . import entry

sys.exit(entry())
