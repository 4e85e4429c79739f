"""ASTRA-sim 2.0's analytical backends (astra-sim/astra-sim) as simulators of a workload."""
