"""What the experiment scripts one level up share (common.py, provenance.py, claims.py) and each paper's runs and report."""
