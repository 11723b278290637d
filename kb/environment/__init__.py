"""The cluster's environment (modules, partitions) over time, and revalidation against it.

- ``snapshot``       an environment snapshot and the diff of two (``EnvSnapshot``);
- ``history``        snapshots kept in a store, saved only when something changed;
- ``revalidate``     judge every lesson's conditions against the latest snapshot;
- ``lmod_versions``  Lmod's version order.

Beside ``lessons``, not above it. May import ``store``, ``signatures``, ``safety`` and the top
of ``kb``.
"""
