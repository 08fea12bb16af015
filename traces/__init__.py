"""Real recorded training traces by other projects, shipped so that tests and benchmarks reproduce anywhere.

Each file keeps its project's licence (Apache-2.0 or MIT); ``SOURCES.md`` names the repository, path, commit
and licence of each.  Read them with ``adaptive_eval.convert.load_real(name)`` / ``real_traces()``.
"""
