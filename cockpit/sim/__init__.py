"""cockpit.sim"""
