"""Safety: what may never be stored, and what a recalled lesson may never do.

- ``normalise`` strips escape, control and zero-width characters, then redacts (``scrub``):
              the one way text enters a store or leaves hpcmem;
- ``redact``  removes credentials from text before it is stored, shown or shared: gitleaks'
              rules (``gitleaks_rules`` reads them from the installed wheel, ``gitleaks_scan``
              applies them), then hpcmem's HPC rules;
- ``lint``    flags fixes that weaken safeguards and text that reads as instructions;
- ``trust``   the provenance label shown next to every recalled lesson.

May import: the cross-cutting modules at the top of ``kb`` only, so every stage can use it.
"""
