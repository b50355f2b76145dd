"""What a job reports: the meters' numbers (metrics.py), report.json + summary table (report.py, generation.py),
report.html (page.py, its figures in plots.py and generation_plots.py)."""
