"""The one exception type people see: a one-line message that says what to do."""


class CockpitError(ValueError):
    """A problem a person can fix: one line that says what was wrong and what to do."""
