"""Offload stress harness (`colibri stress`): drive a Pool under a tiny RAM budget with the SSD
tier on, inject faults on a clock, check every output bit for bit against an all-resident MoeExecutor.

Modules: settings (config), schedule (fault clock), workload (job streams), reference (MoeExecutor),
accounting (tokens), faults (injectors), rss (worker memory), harness (the run), report (report.json).
"""
