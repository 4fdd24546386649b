"""cockpit.telemetry"""
