"""Behaviour traces and fitting the surrogate to them: the trace format, the likelihood
block by block, the opinion-update least squares, held-out validation, ground-truth draws.
"""
