"""CockpitError is its own kind: an `except ValueError` written for int() never swallows it."""

from __future__ import annotations

import pytest

from cockpit.core.errors import CockpitError
from cockpit.faces.prompt import parse_command


def test_a_cockpit_error_is_not_a_value_error():
    assert not issubclass(CockpitError, ValueError)


def test_an_except_value_error_lets_the_specific_message_through():
    with pytest.raises(CockpitError, match=r"'c=0,4': concurrency levels must be 1 or more"):
        try:
            parse_command("bench c=0,4")
        except ValueError:  # what a number parser around it would catch
            pass
