"""Shared infrastructure of every PolicySim package: config validation, redaction of secrets,
optional extras, JSON lines, plugins, checked data and ``.npz`` files, progress bars, the
compiled row normalisation (with its software prefetch) both the simulator and the surrogate
users run.

It imports no other PolicySim package; every one of them may import it.
"""
