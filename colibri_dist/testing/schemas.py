"""Random JSON schemas for the structured-output tests and benchmark: nested objects, arrays, enums, bounded numbers,
strings with length bounds, optional properties. Bounded so a random-weight model can finish them: a
number carries multipleOf (without one its decimals are unbounded, and a random model, unlike a trained
one, has no reason to stop writing digits: "6.3333..." until max_tokens)."""
import numpy as np

WORDS = ["id", "name", "city", "score", "tags", "items", "ok", "kind", "unit", "value", "note", "level"]


def random_schema(rng, depth=0):
    kinds = ["object", "array", "string", "integer", "number", "boolean", "enum", "null"]
    if depth >= 2:
        kinds = kinds[2:]
    kind = kinds[int(rng.integers(len(kinds)))] if depth else "object"
    if kind == "object":
        names = list(rng.choice(WORDS, size=int(rng.integers(1, 4)), replace=False))
        props = {str(n): random_schema(rng, depth + 1) for n in names}
        required = [n for n in props if rng.random() < 0.7]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    if kind == "array":
        lo = int(rng.integers(0, 2))
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo,
                "maxItems": lo + int(rng.integers(0, 3))}
    if kind == "string":
        lo = int(rng.integers(0, 3))
        return {"type": "string", "minLength": lo, "maxLength": lo + int(rng.integers(1, 6))}
    if kind == "integer":
        lo = int(rng.integers(-50, 50))
        return {"type": "integer", "minimum": lo, "maximum": lo + int(rng.integers(0, 500))}
    if kind == "number":
        lo = float(rng.integers(-10, 10))
        return {"type": "number", "minimum": lo, "maximum": lo + float(rng.integers(1, 100)),
                "multipleOf": [0.5, 0.25, 0.125][int(rng.integers(3))]}   # exact in binary (jsonschema divides floats)
    if kind == "enum":
        return {"enum": [str(w) for w in rng.choice(WORDS, size=int(rng.integers(1, 4)), replace=False)]}
    return {"type": kind}


def schemas(n, seed=0):
    rng = np.random.default_rng(seed)
    return [random_schema(rng) for _ in range(n)]
