"""The pipeline's option error, shared by the option parser and the store lookup."""

from __future__ import annotations


class OptionError(ValueError):
    """An option is missing, unknown in value, or inconsistent with another one."""
