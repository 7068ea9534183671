"""What the experiments share (common.py: sweeps of train.run, statistics, figures, atomic
writes) and each experiment's report builder (<name>_report.py: tables, figures, report.json
from the finished runs). The runnable experiments are the modules one level up."""
