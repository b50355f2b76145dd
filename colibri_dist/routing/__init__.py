"""Routing room: gating semantics per family, token-bucket balancer, placement planner (no ray)."""
