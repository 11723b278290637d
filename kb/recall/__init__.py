"""Recall: which stored lessons apply to a new failure, and how sure that is.

- ``recaller``      the flow: candidates from every store of the stack, scored, banded
                    (``Recaller``);
- ``scoring``       DECIDES: the calibrated probability that a lesson applies, and from it
                    the band (match / related / none); its fit is ``recall_model.json``;
- ``fixtokens``     the names and versions a fix depends on, one of scoring's signals;
- ``advice``        built-in advice from the failure's own numbers, when no lesson says more;
- ``embed``, ``onnx_encoder``, ``vector_index``: sentence embeddings and their FAISS index.

The top of the pipeline. May import every other stage and the top of ``kb``.
"""
