"""Profiles (*.yaml) and bundled architectures (models/*.json), shipped with the package."""
