"""Shared infrastructure of every PolicySim package: config validation, redaction of secrets,
optional extras, JSON lines, plugins, checked data and ``.npz`` files, progress bars.

It imports no other PolicySim package; every one of them may import it.
"""
