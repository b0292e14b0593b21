"""The core of the simulation: the world's arrays, one round of platform dynamics, the
recommender's channels, the kernels and the round's metrics.
"""
