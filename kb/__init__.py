"""hpcmem.kb"""
