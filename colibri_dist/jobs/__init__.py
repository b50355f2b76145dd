"""Jobs room: `colibri run` batch jobs.

    runner.py                 run_job: config -> job kind -> shards -> outputs + report (the entry point)
    moe_layer.py              kind moe-layer (hidden states .npy through MoE layers)
    token_classification.py   kind token-classification (+ classifier_head.py, its dense math)
    generation/               kinds generate and score (and the Ray Data batch path)
    run/                      what every run shares: shards + manifest, output lock, progress, executors
    reports/                  meters' numbers, report.json, report.html, summary tables, figures
The demo models live in demos/, the stress harness in stress/.
"""
