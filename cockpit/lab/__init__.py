"""One open lab: a profile on a box, decided once, and the tune loop that runs on it."""
