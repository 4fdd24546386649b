"""The Textual face of cockpit: one screen over the same Launcher, Monitor and Journal as `cockpit run`.

`app.CockpitApp` is the app; `session.Session` and `control.Control` hold the data and the
threads and import no Textual, so they can be read (and tested) without a screen.
"""
