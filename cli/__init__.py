"""hpcmem.cli"""
