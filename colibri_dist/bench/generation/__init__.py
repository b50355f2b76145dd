"""Generation benchmarks: what the layers above the model cost, each against the model's own time in the same run.

Role: generate.py is `colibri bench generate` (generate()'s schedule, sample, detokenize and stop checks per
token, and time to first token); prefix.py is `colibri bench prefix` (automatic prefix caching on a batch job,
off against on, same bits); serve.py is `colibri bench serve` (the HTTP server: start-up, streamed clients
against the same requests in process).
"""
