"""cockpit.runner"""
