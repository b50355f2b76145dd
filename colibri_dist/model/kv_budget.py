"""KV sizes: max_seq_len against the model's limit, the default KV byte budget, load-time warnings.

Role in the data flow: LLM asks check_max_seq_len(...) and default_budget(...) before it builds the
KVCache, and warn_limits(...) after: the default budget holds max_num_seqs sequences of max_seq_len
tokens, capped by RAM_FRACTION of the RAM free at load. Its pages are touched only as the cache fills
(RSS stays small), so a big budget is said only when it matters, once per process, as one log line
(logger colibri.kv_cache): a warning when it clamps a sequence's length or an explicit budget exceeds
the free RAM; an info line when the default holds fewer than max_num_seqs full sequences.
"""
import logging
import os

from ..errors import InvalidArgument

RAM_FRACTION = 0.25          # of MemAvailable at load, at most, for a default KV budget
FALLBACK_RAM = 4 << 30       # when the free RAM cannot be read
log = logging.getLogger("colibri.kv_cache")


def available_ram():
    """Bytes of MemAvailable (/proc/meminfo), else the free physical pages, else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_max_seq_len(max_seq_len, limit, allow_long_context=False, where="model"):
    """-> max_seq_len (the model's max_position_embeddings when None); beyond it only when forced."""
    if max_seq_len is None:
        return limit
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len <= 0:
        raise InvalidArgument(f"max_seq_len must be a positive integer, got {max_seq_len!r}", parameter="max_seq_len",
                              value=max_seq_len)
    if max_seq_len > limit and not allow_long_context:
        raise InvalidArgument(f"max_seq_len={max_seq_len} is beyond {where}'s max_position_embeddings={limit}; "
                              f"positions past it were never trained (pass allow_long_context=True to force it, "
                              f"e.g. with a rope-scaled checkpoint)", parameter="max_seq_len", value=max_seq_len)
    return max_seq_len


def default_budget(block_bytes, block_size, max_num_seqs, max_seq_len, available=None):
    """-> (bytes, wanted bytes, cap bytes): max_num_seqs x max_seq_len positions in whole blocks, at most
    RAM_FRACTION of the free RAM (and at least one block)."""
    blocks = max_num_seqs * -(-max_seq_len // block_size)
    want = blocks * block_bytes
    ram = available_ram() if available is None else available
    cap = int((ram if ram else FALLBACK_RAM) * RAM_FRACTION)
    return max(block_bytes, min(want, cap)), want, cap


def warn_limits(cache, max_seq_len, max_num_seqs, default, cap=None, available=None):
    """Say what the KV budget means for this load, each distinct line once per process (say_once):
    a warning when it clamps one sequence's length or an explicit budget is more than the free RAM
    (the pages are reserved lazily: it bites only when the cache fills); an info line (hidden unless
    logging shows INFO) when the default budget, capped by the RAM, holds fewer than max_num_seqs
    full-length sequences (long batches preempt, nothing is lost)."""
    held, nbytes = cache.n_blocks * cache.block_size, cache.n_blocks * cache.block_bytes
    if cache.max_seq_len < max_seq_len:
        say_once(logging.WARNING, f"colibri KV cache: {nbytes:,} bytes hold {held:,} positions, so max_seq_len is "
                                  f"capped from {max_seq_len:,} to {cache.max_seq_len:,} (raise kv_cache_bytes or "
                                  f"lower max_seq_len)")
    elif default and held < max_num_seqs * max_seq_len:
        say_once(logging.INFO, f"colibri KV cache: the default budget is {nbytes:,} bytes ({RAM_FRACTION:.0%} of the "
                               f"free RAM at most, cap {cap:,}; reserved lazily): {held:,} positions, fewer than "
                               f"max_num_seqs={max_num_seqs} x max_seq_len={max_seq_len:,}, so long batches preempt")
    ram = available_ram() if available is None else available
    if not default and ram and nbytes > ram:
        say_once(logging.WARNING, f"colibri KV cache: kv_cache_bytes={nbytes:,} is more than the {ram:,} bytes of "
                                  f"free RAM; reserved lazily, it swaps or is killed when it fills (lower "
                                  f"kv_cache_bytes)")


_SAID = set()


def say_once(level, text):
    """Log `text` on the colibri.kv_cache logger, once per process (a model loaded again says nothing)."""
    if text not in _SAID:
        _SAID.add(text)
        log.log(level, text)
