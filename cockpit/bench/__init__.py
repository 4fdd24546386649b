"""cockpit.bench"""
