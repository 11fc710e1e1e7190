"""Backends: where the arithmetic runs (cpu in the core; cuda loaded on demand)."""
