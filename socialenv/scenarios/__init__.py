"""Scenarios: the ``Scenario`` arrays, the built-in synthetic populations, the profile and
text generators both use, and the dataset loaders.
"""
