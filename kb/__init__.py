"""hpcmem.kb: the knowledge base, one sub-package per stage of the pipeline.

    safety  <-  signatures  <-  store  <-  jobs  <-  lessons      <-  recall
                                       store  <-  jobs  <-  environment  <-  recall

(``a <- b``: b may import a.) ``environment`` sits beside ``lessons``: it reads job requests
(``jobs``) to check them against the site's limits; ``safety`` may be used by every stage.

A stage imports only the stages before it (``tests/test_layering.py`` checks this, lazy
imports included). The cross-cutting modules at this level - ``errors``, ``config``,
``slurm_units``, ``text`` - import no stage. Nothing is imported here: ``import hpcmem.kb`` must stay
free, because agents pay start-up on every ``recall``.
"""
