"""What a job reports: the meter and its numbers (metrics.py), report.json + summary table (report.py; the
generation kinds' fields in generation.py), report.html (page.py, its figures in plots.py and generation_plots.py)."""
