"""Jobs room: `colibri run` batch jobs, every kind through one runner.

    runner.py                 run_job: config -> kind (KINDS) -> plan -> engine -> shards -> report (the one loop)
    moe_kind.py               what the kinds on the MoE executor alone share (open the container, the executor)
    moe_layer.py              kind moe-layer (hidden states .npy through MoE layers)
    token_classification.py   kind token-classification (+ classifier_head.py, its dense math)
    generation/               kinds generate and score, on a whole LLM (and the Ray Data batch path)
    run/                      what every run shares: the plan, shards + manifest, the resume signature, partial
                              rows, output lock, progress, executors
    reports/                  the meter, report.json, report.html, summary tables, figures
The demo models live in demos/, the stress harness in stress/.
"""
