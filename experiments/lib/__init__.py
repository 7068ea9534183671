"""What the experiment scripts share (common.py, provenance.py, claims.py) and each paper's runs and report."""
