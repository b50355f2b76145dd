"""Dispatch `python -m colibri_dist.bench NAME ...` to the main(argv) of NAME's module (MODULES)."""
import importlib
import sys

NAMES = ["kernels", "kquants", "model", "model_ops", "store", "pool", "convert", "numa", "generate", "integrity", "serve",
         "peer", "prefix", "levels", "scale", "structured", "calls", "template", "gguf-quality"]
# NAME -> its module under colibri_dist.bench: one folder per family
MODULES = {"kernels": "kernels.run", "kquants": "kernels.kquants", "levels": "kernels.levels",
           "model_ops": "kernels.ops",
           "model": "model.run", "peer": "model.peer", "scale": "scale.run",
           "store": "store.run", "convert": "format.convert", "integrity": "format.integrity",
           "gguf-quality": "format.gguf_quality",
           "pool": "pool.run", "numa": "numa.run",
           "generate": "generation.generate", "prefix": "generation.prefix", "serve": "generation.serve",
           "structured": "generation.structured", "calls": "generation.calls",
           "template": "generation.template"}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in NAMES:
        print(f"usage: python -m colibri_dist.bench {{{','.join(NAMES)}}} [options]", file=sys.stderr)
        return 2
    module = importlib.import_module(f"colibri_dist.bench.{MODULES[argv[0]]}")
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
