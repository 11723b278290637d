"""The store_meta keys that tell a store's vector indexes to catch up.

Written by ``recall.embed`` when embeddings change and by ``store.refingerprint`` when
fingerprints do; read by ``recall.vector_index``. Kept in the store so the lower stage can
bump them without importing recall.
"""

# Any embedding change / a change that invalidates vectors already indexed.
GENERATION_KEY = "index_generation"
REBUILD_GENERATION_KEY = "index_rebuild_generation"
