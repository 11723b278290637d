"""hpcmem.schemas"""
