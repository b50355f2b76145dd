"""The demo models `colibri run` builds once into the cache: the demo LLM (llm.py, llm_cache.py), the
demo token classifier and its numpy oracle (classifier.py, classifier_reference.py), crash-safe build_once."""
