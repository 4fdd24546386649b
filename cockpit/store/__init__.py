"""The user's files and what cockpit keeps: configs, profiles, the journal, the calibration file."""
