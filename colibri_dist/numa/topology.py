"""NUMA topology of a machine, read from sysfs (root overridable).

Role: the first step of NUMA placement. `topology()` describes the nodes
(online CPUs, memory, distances) and the SMT sibling groups; numa.plan turns it
into per-worker CPU sets and memory policies. The sysfs root can point at a
copied tree (tests/fixtures/sysfs/*, or another machine's /sys) so plans can be
made and checked for machines we do not have.

Files read, relative to the root (normally /sys):
  devices/system/node/node<N>/cpulist, meminfo ("Node N MemTotal: X kB"), distance
  devices/system/cpu/online, cpu<N>/online, cpu<N>/topology/thread_siblings_list
Offline CPUs are dropped everywhere. Without a node directory (non-NUMA
kernel) or off Linux the machine is one node holding every CPU.
"""
import os
import re
import sys
from dataclasses import dataclass, field

from ..errors import ConfigError, InvalidArgument

DEFAULT_LOCAL_DISTANCE, DEFAULT_REMOTE_DISTANCE = 10, 20


@dataclass(frozen=True)
class Node:
    id: int
    cpus: tuple          # online CPUs, ascending
    mem_bytes: int       # MemTotal of the node (0 for a CPU-only node)


@dataclass(frozen=True)
class Topology:
    nodes: tuple                      # Node, ascending id
    distances: tuple                  # distances[i][j] between nodes[i] and nodes[j] (SLIT units, 10 = local)
    siblings: dict = field(default_factory=dict)  # cpu -> tuple of online SMT siblings (itself included)
    offline_cpus: tuple = ()
    source: str = "sysfs"             # "sysfs" or "fallback" (non-Linux / no NUMA in sysfs)
    sysfs_root: str = None

    def node(self, node_id):
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise InvalidArgument(f"no NUMA node {node_id}; nodes are {[n.id for n in self.nodes]}")

    def distance(self, a, b):
        ids = [n.id for n in self.nodes]
        return self.distances[ids.index(a)][ids.index(b)]

    @property
    def cpu_nodes(self):
        return tuple(n for n in self.nodes if n.cpus)

    @property
    def memory_nodes(self):
        return tuple(n for n in self.nodes if n.mem_bytes > 0)

    def cores(self, cpus):
        """Group `cpus` into physical cores: list of tuples, each its online siblings among `cpus`."""
        wanted, seen, groups = set(cpus), set(), []
        for cpu in sorted(wanted):
            if cpu in seen:
                continue
            group = tuple(c for c in self.siblings.get(cpu, (cpu,)) if c in wanted)
            group = group if cpu in group else (cpu,)
            seen.update(group)
            groups.append(group)
        return groups

    def to_dict(self):
        return {
            "source": self.source,
            "sysfs_root": self.sysfs_root,
            "nodes": [{"id": n.id, "cpus": list(n.cpus), "mem_bytes": n.mem_bytes} for n in self.nodes],
            "distances": [list(row) for row in self.distances],
            "offline_cpus": list(self.offline_cpus),
            "smt_groups": [list(g) for g in self.cores([c for n in self.nodes for c in n.cpus]) if len(g) > 1],
        }


def parse_cpulist(text, where="cpulist"):
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; '' -> []."""
    out = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?(?::(\d+))?", part)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise ConfigError(f"{where}: {part!r} is not a CPU list entry (expected N or N-M)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        out.extend(range(lo, hi + 1, int(m.group(3) or 1)))
    return sorted(set(out))


def format_cpulist(cpus):
    """[0, 1, 2, 5] -> '0-2,5' (the kernel's own format)."""
    cpus, parts, i = sorted(set(cpus)), [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def _read(path):
    with open(path, encoding="ascii") as f:
        return f.read()


def _read_optional(path):
    try:
        return _read(path)
    except FileNotFoundError:
        return None


def resolve_root(sysfs_root):
    """The directory that holds devices/system (accepts /sys or a copy of /)."""
    root = "/sys" if sysfs_root is None else os.fspath(sysfs_root)
    for candidate in (root, os.path.join(root, "sys")):
        if os.path.isdir(os.path.join(candidate, "devices", "system")):
            return candidate
    if sysfs_root is not None:
        raise InvalidArgument(f"sysfs root {root}: no devices/system directory in it (or in {root}/sys)")
    return None


def _online_cpus(cpu_dir):
    """Online CPU ids: cpu/online, else every cpuN whose cpuN/online is absent or 1."""
    listed = _read_optional(os.path.join(cpu_dir, "online"))
    present = sorted(int(m.group(1)) for name in os.listdir(cpu_dir) if (m := re.fullmatch(r"cpu(\d+)", name)))
    if listed is not None:
        online = set(parse_cpulist(listed, os.path.join(cpu_dir, "online")))
    else:
        online = set(present)
    for cpu in present:
        flag = _read_optional(os.path.join(cpu_dir, f"cpu{cpu}", "online"))
        if flag is not None and flag.strip() == "0":
            online.discard(cpu)
    offline = sorted(set(present) - online)
    return online, offline


def _siblings(cpu_dir, online):
    out = {}
    for cpu in sorted(online):
        path = os.path.join(cpu_dir, f"cpu{cpu}", "topology", "thread_siblings_list")
        text = _read_optional(path)
        group = parse_cpulist(text, path) if text is not None else [cpu]
        out[cpu] = tuple(c for c in group if c in online) or (cpu,)
    return out


def _mem_total(node_dir):
    path = os.path.join(node_dir, "meminfo")
    text = _read_optional(path)
    if text is None:
        return 0
    m = re.search(r"MemTotal:\s+(\d+)\s*kB", text)
    if not m:
        raise ConfigError(f"{path}: no 'MemTotal: N kB' line")
    return int(m.group(1)) * 1024


def _distances(node_root, ids):
    rows = []
    for node_id in ids:
        path = os.path.join(node_root, f"node{node_id}", "distance")
        text = _read_optional(path)
        if text is None:
            rows.append(tuple(DEFAULT_LOCAL_DISTANCE if o == node_id else DEFAULT_REMOTE_DISTANCE for o in ids))
            continue
        try:
            row = tuple(int(v) for v in text.split())
        except ValueError:
            raise ConfigError(f"{path}: distances must be integers, got {text.strip()!r}") from None
        if len(row) != len(ids):
            raise ConfigError(f"{path}: {len(row)} distances for {len(ids)} nodes {ids}")
        rows.append(row)
    return tuple(rows)


def single_node(cpus=None, source="fallback"):
    """One node holding every CPU: non-Linux hosts and kernels without NUMA."""
    if cpus is None:
        cpus = range(os.cpu_count() or 1)
    cpus = tuple(sorted(cpus))
    mem = _total_memory_bytes()
    return Topology(nodes=(Node(0, cpus, mem),), distances=((DEFAULT_LOCAL_DISTANCE,),),
                    siblings={c: (c,) for c in cpus}, source=source)


def _total_memory_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def topology(sysfs_root=None):
    """Read the NUMA topology. sysfs_root=None reads this machine (/sys on Linux)."""
    if sysfs_root is None and not sys.platform.startswith("linux"):
        return single_node()
    root = resolve_root(sysfs_root)
    if root is None:
        return single_node()
    cpu_dir = os.path.join(root, "devices", "system", "cpu")
    node_root = os.path.join(root, "devices", "system", "node")
    online, offline = _online_cpus(cpu_dir) if os.path.isdir(cpu_dir) else (set(), [])
    ids = sorted(int(m.group(1)) for name in (os.listdir(node_root) if os.path.isdir(node_root) else [])
                 if (m := re.fullmatch(r"node(\d+)", name)))
    if not ids:
        topo = single_node(sorted(online) or None, source="fallback")
        return Topology(topo.nodes, topo.distances, _siblings(cpu_dir, online) if online else topo.siblings,
                        tuple(offline), "fallback", root)
    nodes = []
    for node_id in ids:
        node_dir = os.path.join(node_root, f"node{node_id}")
        path = os.path.join(node_dir, "cpulist")
        text = _read_optional(path)
        cpus = [c for c in parse_cpulist(text or "", path) if c in online or not online]
        nodes.append(Node(node_id, tuple(cpus), _mem_total(node_dir)))
    siblings = _siblings(cpu_dir, online) if online else {}
    return Topology(tuple(nodes), _distances(node_root, ids), siblings, tuple(offline), "sysfs", root)
