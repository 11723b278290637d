"""Signatures: the stable fingerprint of a failure class, computed from text alone.

- ``fingerprint``   normalise an error to a template, name its category, hash both;
- ``rules_digest``  the fingerprint rules in effect (``categories.toml`` plus a site's file)
                    and their digest, so a store can tell when its fingerprints went stale;
- ``categories.toml``  the built-in category rules (package data).

Pure functions of text and rules: no store. May import ``safety`` and the top of ``kb``.
"""
