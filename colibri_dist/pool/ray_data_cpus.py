"""How many CPUs each colibri Ray Data actor may reserve so that the whole pipeline fits the cluster.

Role in the data flow: Processor (pool/ray_data.py) asks `actor_cpus(...)` before it adds its actor
stage. A Ray Data pipeline whose actors hold every CPU never runs the tasks that feed them (a
`read_json` read task asks 1 CPU by default, a row function its num_cpus): it waits forever without
a word. So the CPUs of one task of every stage before the actors (`upstream_cpus(ds)`, read from the
dataset's logical plan) and of the row functions count too: the actors' default 1-CPU reservation
shrinks to fit, and an explicit num_cpus that cannot fit is an InvalidArgument saying what to change.
"""
from ..errors import InvalidArgument

TASK_DEFAULT_CPUS = 1.0       # Ray Data's map and read tasks ask 1 CPU unless told otherwise


def upstream_cpus(ds):
    """CPUs one task (or the actor pool) of every stage of `ds` asks for at once: a read or map stage
    its ray_remote_args num_cpus (default 1), an actor stage that times its max size; items and
    already materialized blocks none. 0 when the plan cannot be read (another Ray Data version)."""
    dag = getattr(getattr(ds, "_logical_plan", None), "dag", None)
    seen, todo, total = set(), [dag] if dag is not None else [], 0.0
    while todo:
        op = todo.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        total += _stage_cpus(op)
        todo += list(getattr(op, "input_dependencies", None) or [])
    return total


def _stage_cpus(op):
    args = getattr(op, "ray_remote_args", None)
    if not isinstance(args, dict):
        return 0.0                      # not a map/read stage: from_items, materialized input, ...
    cpus = args.get("num_cpus")
    if cpus is None:
        cpus = 0.0 if args.get("num_gpus") else TASK_DEFAULT_CPUS
    return float(cpus) * (getattr(getattr(op, "compute", None), "max_size", None) or 1)


def actor_cpus(config, row_cpus, upstream, total):
    """CPUs per actor: config.num_cpus, or 1 shrunk so that max_actors actors, one task of each row
    function (row_cpus) and the stages before them (upstream) fit `total` CPUs; else InvalidArgument."""
    want = 1.0 if config.num_cpus is None else float(config.num_cpus)
    others = row_cpus + upstream
    if config.max_actors * want + others <= total:
        return want
    if config.num_cpus is not None or others >= total:
        raise InvalidArgument(_too_many(config, want, row_cpus, upstream, total), parameter="num_cpus",
                              value=config.num_cpus)
    return int((total - others) / config.max_actors * 100) / 100


def _too_many(config, want, row_cpus, upstream, total):
    asked = config.max_actors * want + row_cpus + upstream
    return (f"ColibriProcessorConfig: {config.max_actors} actors x num_cpus={want:g} plus {row_cpus:g} CPUs for "
            f"the pre/postprocess tasks plus {upstream:g} for the stages before them (e.g. a read_json task) "
            f"ask {asked:g} CPUs, more than the cluster's {total:g} CPUs: the pipeline would wait forever (lower "
            f"ColibriProcessorConfig.num_cpus or concurrency, the row functions' num_cpus "
            f"(*_map_kwargs), or the read's, e.g. read_json(..., num_cpus=0))")
