"""The software prefetch of :mod:`policysim_infra._prefetch`, under its former name: the kernel
files of earlier revisions import it from here (``benchmarks/kernel_pairs.py --compare``)."""

from policysim_infra._prefetch import prefetch, prefetch_item, prefetch_row

__all__ = ["prefetch", "prefetch_item", "prefetch_row"]
