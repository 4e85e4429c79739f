"""The AIOB stage: each point's compute-time profile, modelled (roofline), measured (torch) or a user's file."""
