"""hpcmem.ingest"""
