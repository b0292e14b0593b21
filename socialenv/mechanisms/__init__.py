"""Opt-in mechanisms the simulation consults through one hook each: Hawkes activity,
event chains, governance (moderation) state.
"""
