"""The byte units, re-exported for the render layer and for notebooks written against this path; they live
in ``symvram.units`` (core) so that the analysis layer parses sizes without importing the render layer."""
from ..units import UNITS, check_units, fmt_bytes, fmt_flops, in_units, parse_size

__all__ = ["UNITS", "check_units", "fmt_bytes", "fmt_flops", "in_units", "parse_size"]
