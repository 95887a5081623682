"""Test support: OpInfo tables (NumPy float64 references and sample inputs for every op)."""
